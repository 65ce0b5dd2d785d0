"""Strip trailing whitespace from the files named on the command line; exit 1 if any changed."""

import sys
from pathlib import Path


def main(paths: list[str]) -> int:
    changed = 0
    for name in paths:
        path = Path(name)
        text = path.read_text()
        fixed = "".join(line.rstrip() + "\n" for line in text.splitlines())
        if fixed != text:
            path.write_text(fixed)
            sys.stdout.write(f"Fixing {name}\n")
            changed += 1
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

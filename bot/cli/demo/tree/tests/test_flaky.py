from pathlib import Path

# The first attempt in a workspace leaves this marker and fails; later attempts pass.
MARKER = Path(__file__).with_name(".flaky_attempted")


def test_eventually_passes() -> None:
    if not MARKER.exists():
        MARKER.write_text("attempted\n")
        raise AssertionError("first attempt fails on purpose")

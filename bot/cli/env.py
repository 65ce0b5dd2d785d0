"""`paritybot env parse FILE`: what paritybot reads from a contributor's collect_env paste."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bot.core.collect_env import extract_collect_env, parse_collect_env
from bot.core.models import EnvFacts

_LABELS: tuple[tuple[str, str], ...] = (
    ("torch", "PyTorch"),
    ("torch_cuda", "CUDA build"),
    ("torch_hip", "ROCm build"),
    ("cuda_available", "CUDA available"),
    ("cuda_runtime", "CUDA runtime"),
    ("cudnn", "cuDNN"),
    ("nccl", "NCCL"),
    ("nvidia_driver", "NVIDIA driver"),
    ("gpu_models", "GPUs"),
    ("python", "Python"),
    ("os", "OS"),
    ("libc", "libc"),
    ("gcc", "GCC"),
    ("clang", "Clang"),
    ("cmake", "CMake"),
    ("platform", "Platform"),
)


def format_env_facts(facts: EnvFacts) -> str:
    """Human-readable summary, one fact per line."""
    out: list[str] = []
    for name, label in _LABELS:
        value = getattr(facts, name)
        if value is None:
            continue
        if isinstance(value, list):
            value = ", ".join(value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        out.append(f"{label + ':':<16}{value}")
    if facts.packages:
        out.append("Packages:")
        out.extend(f"  {name}=={version}" for name, version in sorted(facts.packages.items()))
    if facts.missing:
        out.append(f"{'Not reported:':<16}{', '.join(facts.missing)}")
    out.extend(f"Note: {note}" for note in facts.notes)
    return "\n".join(out)


def env_parse_main(path: str, as_json: bool) -> int:
    """``paritybot env parse FILE [--json]``: 0 parsed, 1 no collect_env output in it, 2 unreadable."""
    try:
        content = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"paritybot: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    text = extract_collect_env(content)
    if text is None:
        print(f"{path}: no `python -m torch.utils.collect_env` output found", file=sys.stderr)
        return 1
    facts = parse_collect_env(text)
    if as_json:
        print(json.dumps(facts.model_dump(mode="json"), indent=2))
    else:
        print(format_env_facts(facts))
    return 0

"""Parse a contributor's ``python -m torch.utils.collect_env`` paste into :class:`EnvFacts`.

The output format changed many times between 2018 and today (``Yes``/``No`` booleans, new lines per
release, CPU blocks, ``[pip]`` vs ``[pip3]``, vLLM's variant sections) and people paste it with
prompts, indentation, CRLF line endings, inside fences or ``<details>`` blocks, or only half of it.
So the parser is line based and keyed on the field names it knows: anything else is ignored, a field
that is absent or says ``Could not collect`` is reported as missing, and no value is ever guessed.

Everything here is pure; ``paritybot env parse`` (:mod:`bot.cli.env`) reads the file.

Why one module past 400 lines: it is one parser of one format, and its parts (line cleaning,
value normalisers, the field state machine, finding the paste in a description) each exist for
the others; split, each part would be read only through the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from packaging.utils import canonicalize_name

from bot.core.models import ENV_FACT_FIELDS, EnvFacts

log = structlog.get_logger(__name__)

HEADER = "Collecting environment information"

# collect_env's own words for "no value". Compared lower-cased, after stripping.
_NULL_VALUES = frozenset({"", "could not collect", "n/a", "none", "no cuda", "no relevant packages"})

# Field line key (lower-cased, whitespace collapsed) → what it feeds. Keys of the "_" kind are read
# for notes or continuation lines only; they never become an EnvFacts field on their own.
_KEYS: dict[str, str] = {
    "pytorch version": "torch",
    "is debug build": "_debug",
    "cuda used to build pytorch": "torch_cuda",
    "rocm used to build pytorch": "torch_hip",
    "os": "os",
    "gcc version": "gcc",
    "clang version": "clang",
    "cmake version": "cmake",
    "libc version": "libc",
    "python version": "python",
    "python platform": "platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "cuda_runtime",
    "cuda_module_loading set to": "_ignore",
    "gpu models and configuration": "gpu_models",
    "nvidia driver version": "nvidia_driver",
    "cudnn version": "cudnn",
    "nccl version": "nccl",
    "is xpu available": "_xpu_available",
    "xpu used to build pytorch": "_xpu_build",
    "intel gpu driver version": "_intel_driver",
    "intel gpu models onboard": "_intel_gpus",
    "intel gpu models detected": "_ignore_list",
    "hip runtime version": "_hip_runtime",
    "miopen runtime version": "_miopen",
    "is xnnpack available": "_ignore",
    "caching allocator config": "_ignore",
    # vLLM's variant of the script
    "vllm version": "_vllm",
    "vllm ascend version": "_vllm",
    "rocm version": "_vllm",
    "neuron sdk version": "_vllm",
}

# Keys whose value may continue on the following lines (until a blank line or another field).
_MULTILINE = frozenset({"gpu_models", "cudnn", "_intel_driver", "_intel_gpus", "_ignore_list"})

# Lines that prove a block is torch's output and not a hand-written "OS: Linux" list.
_TORCH_KEYS = frozenset({"torch", "_debug", "torch_cuda", "torch_hip", "cuda_available"})

# The EnvFacts fields a paste can fill, in the order ``missing`` lists them.
FACT_FIELDS: tuple[str, ...] = ENV_FACT_FIELDS

_LIB_LINE = re.compile(r"\[(pip3?|conda)\]\s*(.*)")
_VERSION_AT_START = re.compile(r"\d+(?:\.\d+)+[0-9A-Za-z+]*")
_NUMERIC_VERSION = re.compile(r"\d+(?:\.\d+)+")
_GPU_PREFIX = re.compile(r"GPU\s*\d+\s*:\s*")
_GPU_UUID = re.compile(r"\(UUID:[^)]*\)")
_CUDNN_SO = re.compile(r"libcudnn[a-z_]*\.so\.(\d+(?:\.\d+)*)")
_CUDNN_DYLIB = re.compile(r"libcudnn[a-z_]*\.(\d+(?:\.\d+)*)\.dylib")
_CUDNN_DLL = re.compile(r"cudnn[a-z_]*64_(\d+)\.dll", re.IGNORECASE)
_PIP_FREEZE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(\S+)")
_PIP_LEGACY = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*\(([^)\s]+)\)")
_NCCL_WHEEL = re.compile(r"nvidia-nccl(?:-cu(\d+))?")
# No real collect_env line is longer than this (lscpu flags and LD_LIBRARY_PATH are ignored anyway);
# skipping longer ones keeps every regex below linear-time on hostile input.
_MAX_LINE = 4096
_MAX_KEY = 60
_MARKUP_TAGS = ("<details>", "</details>", "<summary>", "</summary>", "<pre>", "</pre>", "<code>", "</code>")


# --- line cleaning --------------------------------------------------------------------------------


def _strip_markup(line: str) -> str:
    """Drop the quote markers, backticks and HTML tags people wrap a paste in, at both ends.

    Works on indices so a long line of repeated tags costs one pass, not one copy per tag.
    """
    lowered = line.lower()
    start, end = 0, len(line)
    changed = True
    while changed:
        changed = False
        while start < end and line[start].isspace():
            start += 1
        while end > start and line[end - 1].isspace():
            end -= 1
        if start < end and line[start] == ">" and not line.startswith(">>", start):
            start, changed = start + 1, True
        while start < end and line[start] == "`":
            start, changed = start + 1, True
        while end > start and line[end - 1] == "`":
            end, changed = end - 1, True
        for tag in _MARKUP_TAGS:
            if lowered.startswith(tag, start, end):
                start, changed = start + len(tag), True
            if end - len(tag) >= start and lowered.endswith(tag, start, end):
                end, changed = end - len(tag), True
    return line[start:end]


def _split_field(line: str) -> tuple[str, str] | None:
    """``(kind, raw value)`` when the line is a field line we know, else None."""
    colon = line.find(":", 0, _MAX_KEY + 1)
    if colon == -1:
        return None
    kind = _KEYS.get(" ".join(line[:colon].lower().split()))
    return (kind, line[colon + 1 :].strip()) if kind else None


def _is_null(value: str) -> bool:
    return value.strip().lower() in _NULL_VALUES


def _lines(text: str) -> list[str]:
    # splitlines() handles \r\n, \r and \n alike; tabs become spaces so columns split cleanly.
    return [line.expandtabs(4) for line in text.splitlines()]


# --- value normalisers ----------------------------------------------------------------------------


def _python_version(value: str) -> str:
    match = _VERSION_AT_START.match(value)
    if match:
        return match.group(0)
    return value.replace("(64-bit runtime)", "").replace("(32-bit runtime)", "").strip()


def _compiler_version(value: str) -> str:
    """``(Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0`` → ``11.4.0``; raw text when there is no version."""
    rest = value
    if rest.startswith("("):
        close = rest.find(")")
        if close != -1:
            rest = rest[close + 1 :]
    match = _NUMERIC_VERSION.search(rest) or _NUMERIC_VERSION.search(value)
    return match.group(0) if match else value


def _cmake_version(value: str) -> str:
    rest = value[len("version ") :] if value.lower().startswith("version ") else value
    parts = rest.split()
    return parts[0] if parts else value


def _bool(value: str) -> bool | None:
    lowered = value.strip().lower()
    if lowered in {"yes", "true"}:
        return True
    if lowered in {"no", "false"}:
        return False
    return None


def _gpu_entries(lines: list[str]) -> tuple[list[str], bool]:
    """GPU names without ``GPU 0:`` prefixes or UUIDs; also whether MIG devices were listed."""
    gpus: list[str] = []
    mig = False
    for line in lines:
        name = _GPU_UUID.sub("", line).strip()
        if name.startswith("MIG "):
            mig = True
            continue
        match = _GPU_PREFIX.match(name)
        if match:
            name = name[match.end() :]
        name = name.removeprefix("* ").strip()
        if name and not _is_null(name):
            gpus.append(name)
    return gpus, mig


def _versions_agree(versions: set[str]) -> str | None:
    """The most precise version when all the others are its prefixes (8 and 8.4.0), else None."""
    longest = max(versions, key=lambda v: len(v.split(".")))
    parts = longest.split(".")
    for version in versions:
        mine = version.split(".")
        if parts[: len(mine)] != mine:
            return None
    return longest


def _cudnn(lines: list[str]) -> tuple[str | None, str | None]:
    """(normalised cuDNN, note). Unambiguous library versions collapse to one; otherwise say so."""
    text_lines = [line for line in (ln.strip() for ln in lines) if line]
    if not text_lines or all(_is_null(line) for line in text_lines):
        return None, None
    if text_lines[0].lower().startswith("probably one of the following"):
        text_lines = text_lines[1:] or text_lines
    found: set[str] = set()
    for line in text_lines:
        for pattern in (_CUDNN_SO, _CUDNN_DYLIB, _CUDNN_DLL):
            match = pattern.search(line)
            if match:
                found.add(match.group(1))
                break
    if not found:
        if len(text_lines) == 1 and _NUMERIC_VERSION.fullmatch(text_lines[0]):
            return text_lines[0], None
        return "; ".join(text_lines), None
    agreed = _versions_agree(found)
    if agreed is not None:
        return agreed, None
    ordered = sorted(found, key=lambda v: [int(p) for p in v.split(".")])
    return (
        "one of " + ", ".join(ordered),
        "cuDNN: several libraries found (" + ", ".join(ordered) + "); which one torch loads is unknown",
    )


# --- library lines --------------------------------------------------------------------------------


def _pip_entry(value: str) -> tuple[str, str] | None:
    match = _PIP_FREEZE.fullmatch(value) or _PIP_LEGACY.fullmatch(value)
    if match is None:
        return None
    return canonicalize_name(match.group(1)), match.group(2)


def _conda_entry(value: str) -> tuple[str, str] | None:
    parts = value.split()
    if len(parts) < 2 or not any(ch.isdigit() for ch in parts[1]):
        return None
    return canonicalize_name(parts[0]), parts[1]


# --- the parser -----------------------------------------------------------------------------------


@dataclass
class _State:
    """What one pass over the lines has gathered so far."""

    values: dict[str, str] = field(default_factory=dict)
    blocks: dict[str, list[str]] = field(default_factory=dict)
    pip: dict[str, str] = field(default_factory=dict)
    conda: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seen_fields: int = 0
    saw_lib_header: bool = False
    saw_pip: bool = False
    saw_conda: bool = False
    second_paste: bool = False
    continuing: str | None = None


def _feed_library(state: _State, tool: str, value: str) -> None:
    if tool == "conda":
        state.saw_conda = True
    else:
        state.saw_pip = True
    if _is_null(value):
        return
    entry = _pip_entry(value) if tool != "conda" else _conda_entry(value)
    if entry is None:
        return
    target = state.conda if tool == "conda" else state.pip
    # The first row wins: old conda lists repeat `torch ... <pip>` once per stale install.
    target.setdefault(entry[0], entry[1])


def _feed_field(state: _State, kind: str, value: str, line: str) -> None:
    state.seen_fields += 1
    state.continuing = None
    if kind == "_vllm":
        # vLLM prints several "X Version:" lines; keep each of them, not only the first.
        if not _is_null(value):
            state.notes.append(f"vLLM variant of collect_env: {line.partition(':')[0].strip()}: {value}")
        return
    if kind in _MULTILINE:
        if kind in state.blocks:  # a repeated key: the first one stands, as for single values
            return
        state.blocks[kind] = [value] if value else []
        is_list_start = not value or value.lower().startswith("probably one of the following")
        if is_list_start:
            state.continuing = kind
        return
    state.values.setdefault(kind, value)


def _feed_line(state: _State, raw: str) -> bool:
    """Consume one line; False when a second paste starts and parsing should stop."""
    if len(raw) > _MAX_LINE:
        state.continuing = None
        return True
    line = _strip_markup(raw)
    if not line:
        state.continuing = None
        return True
    if HEADER.lower() in line.lower():
        if state.seen_fields:
            state.second_paste = True
            return False
        return True
    lib = _LIB_LINE.match(line)
    if lib:
        state.continuing = None
        _feed_library(state, lib.group(1), lib.group(2).strip())
        return True
    if line.lower().startswith("versions of relevant libraries"):
        state.continuing = None
        state.saw_lib_header = True
        return True
    parsed = _split_field(line)
    if parsed is not None:
        _feed_field(state, parsed[0], parsed[1], line)
        return True
    if state.continuing is not None:
        state.blocks[state.continuing].append(line)
    return True


def _value(state: _State, kind: str) -> str | None:
    value = state.values.get(kind)
    return None if value is None or _is_null(value) else value


def _nccl(state: _State, packages: dict[str, str], torch_cuda: str | None) -> tuple[str | None, str | None]:
    """(NCCL, note) from a ``NCCL version`` line, else the nvidia-nccl wheel or the conda package."""
    direct = _value(state, "nccl")
    if direct:
        return direct, None
    wheels: dict[str, str] = {}
    for name, version in packages.items():
        match = _NCCL_WHEEL.fullmatch(name)
        if match:
            wheels[match.group(1) or ""] = version
    if not wheels:
        return packages.get("nccl"), None
    if len(wheels) == 1:
        return next(iter(wheels.values())), None
    # cu12 and cu13 wheels side by side: torch loads the one of its own CUDA major version.
    listed = ", ".join(f"nvidia-nccl-cu{cu}=={version}" for cu, version in sorted(wheels.items()))
    cuda_major = torch_cuda.split(".")[0] if torch_cuda else None
    if cuda_major in wheels:
        note = f"NCCL: several wheels ({listed}); the cu{cuda_major} one matches torch's CUDA build"
        return wheels[cuda_major], note
    return None, f"NCCL: several wheels ({listed}); which one torch loads is unknown"


def _accelerator_notes(state: _State) -> list[str]:
    notes: list[str] = []
    if _bool(state.values.get("_debug", "")):
        notes.append("debug build of PyTorch")
    hip_runtime = _value(state, "_hip_runtime")
    if hip_runtime:
        notes.append(f"ROCm: HIP runtime {hip_runtime}")
    miopen = _value(state, "_miopen")
    if miopen:
        notes.append(f"ROCm: MIOpen {miopen}")
    if _bool(state.values.get("_xpu_available", "")):
        build = _value(state, "_xpu_build")
        notes.append("XPU available" + (f" (XPU build {build})" if build else ""))
    for line in state.blocks.get("_intel_driver", []):
        notes.append(f"Intel GPU driver: {line.removeprefix('* ').strip()}")
    return notes


def _consistency_notes(facts: EnvFacts) -> list[str]:
    notes: list[str] = []
    if facts.torch_cuda and facts.cuda_available is False:
        notes.append("CUDA build, but CUDA was not available on this machine")
    pip_torch = facts.packages.get("torch")
    if facts.torch and pip_torch and pip_torch.split("+")[0] != facts.torch.split("+")[0]:
        notes.append(
            f"pip lists torch {pip_torch} but the interpreter imported {facts.torch}: several installs?"
        )
    return notes


def _truncation_note(state: _State) -> str | None:
    if not state.seen_fields:
        return None
    if not (state.saw_lib_header or state.saw_pip or state.saw_conda):
        return "the paste stops before 'Versions of relevant libraries'"
    if state.saw_pip and not state.saw_conda:
        return "no [conda] line after the pip list: the paste may stop early"
    return None


def _optional(value: str | None, normalise: Callable[[str], str]) -> str | None:
    return normalise(value) if value else None


def _facts_from_state(state: _State) -> EnvFacts:
    gpus, mig = _gpu_entries(state.blocks.get("gpu_models", []))
    if not gpus:
        gpus, _ = _gpu_entries(state.blocks.get("_intel_gpus", []))
    cudnn, cudnn_note = _cudnn(state.blocks.get("cudnn", []))
    packages = {**state.conda, **state.pip}  # pip wins: it is what the interpreter imports
    torch_cuda = _value(state, "torch_cuda")
    nccl, nccl_note = _nccl(state, packages, torch_cuda)
    facts = EnvFacts(
        source="collect_env",
        torch=_value(state, "torch"),
        torch_cuda=torch_cuda,
        torch_hip=_value(state, "torch_hip"),
        cuda_available=_bool(state.values.get("cuda_available", "")),
        cuda_runtime=_value(state, "cuda_runtime"),
        cudnn=cudnn,
        nccl=nccl,
        nvidia_driver=_value(state, "nvidia_driver"),
        gpu_models=gpus or None,
        python=_optional(_value(state, "python"), _python_version),
        os=_value(state, "os"),
        libc=_value(state, "libc"),
        gcc=_optional(_value(state, "gcc"), _compiler_version),
        clang=_optional(_value(state, "clang"), _compiler_version),
        cmake=_optional(_value(state, "cmake"), _cmake_version),
        platform=_value(state, "platform"),
        packages=packages,
    )
    facts.missing = [name for name in FACT_FIELDS if getattr(facts, name) in (None, {}, [])]
    facts.notes = [*state.notes, *_accelerator_notes(state), *_consistency_notes(facts)]
    facts.notes += [note for note in (cudnn_note, nccl_note, _truncation_note(state)) if note]
    if mig:
        facts.notes.append("MIG devices are configured on the GPUs")
    if state.second_paste:
        facts.notes.append("the text holds more than one collect_env output; only the first was read")
    return facts


def parse_collect_env(text: str) -> EnvFacts:
    """Read one ``collect_env`` output (or any text holding one) into :class:`EnvFacts`.

    Fields the text does not report, or reports as ``Could not collect``/``N/A``/``None``/``No
    CUDA``, are None and named in ``missing``; nothing is ever guessed.
    """
    state = _State()
    for raw in _lines(text):
        if not _feed_line(state, raw):
            break
    return _facts_from_state(state)


# --- finding the paste in a PR description --------------------------------------------------------


def _is_terminator(stripped: str) -> bool:
    """Lines that close the block a paste sits in: fences, lone backticks, headings, details."""
    lowered = stripped.lower()
    return (
        stripped.startswith(("```", "~~~"))
        or stripped == "`"
        or (stripped.startswith("#") and stripped.lstrip("#").startswith(" "))
        or lowered.startswith(("</details>", "<details"))
    )


def _anchor_offset(line: str) -> int | None:
    """Where the paste starts in this line: at the header or at a known field, else None."""
    pos = line.lower().find(HEADER.lower())
    if pos != -1:
        return pos
    return 0 if _field_kind(line) else None


def _block_from(lines: list[str], start: int, offset: int) -> list[str]:
    block = [lines[start][offset:]]
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if _is_terminator(stripped):
            break
        for tag in ("</summary>", "</details>"):
            cut = line.lower().find(tag)
            if cut != -1:
                block.append(line[:cut])
                return block
        block.append(line)
    return block


def _field_kind(raw: str) -> str | None:
    if len(raw) > _MAX_LINE:
        return None
    parsed = _split_field(_strip_markup(raw))
    return parsed[0] if parsed else None


def _looks_like_paste(block: list[str]) -> bool:
    kinds = [kind for kind in map(_field_kind, block) if kind]
    if block and HEADER.lower() in block[0].lower():
        return bool(kinds)
    return len(kinds) >= 2 and any(kind in _TORCH_KEYS for kind in kinds)


def extract_collect_env(body: str) -> str | None:
    """The ``collect_env`` output inside a PR or issue description, or None when there is none.

    Finds it in a fenced block, a ``<details>``/``<summary>`` block, single-backtick lines or bare
    text, with or without the ``Collecting environment information...`` header.
    """
    lines = _lines(body)
    index = 0
    while index < len(lines):
        offset = _anchor_offset(lines[index])
        if offset is None:
            index += 1
            continue
        block = _block_from(lines, index, offset)
        if _looks_like_paste(block):
            return "\n".join(block).strip("\n")
        index += len(block)
    return None


def parse_pr_body(body: str) -> EnvFacts | None:
    """The contributor's environment from a PR description; None when nothing was pasted."""
    text = extract_collect_env(body)
    if text is None:
        log.debug("collect_env.not_found", body_chars=len(body))
        return None
    return parse_collect_env(text)

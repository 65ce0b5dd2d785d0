"""The environment-parity table: CI's pinned reference vs this run vs the contributor's paste.

Pure: it takes :class:`EnvFacts` (from the probe, the config and the PR description) and returns a
:class:`ParityReport`. Versions are compared at the precision both sides give ("12.1" matches
"12.1.105"), local version tags (``+cu121``) only count when both sides show one, and cuDNN's
integer form (``8902``, as ``torch.backends.cudnn.version()`` prints it) matches ``8.9.2``.

Longer than most modules: each row of the table has its own comparison rule, kept together so
the table reads as one decision.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable

from packaging.utils import canonicalize_name

from bot.core.models import (
    ENV_FACT_FIELDS,
    Advice,
    AdviceKind,
    EnvFacts,
    ParityReport,
    ParityRow,
    ParityVerdict,
)
from runner.project_stack import ProjectStack

PKG_PREFIX = "pkg:"

# Rows in table order. The optional ones only appear when some side reports a value.
_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("torch", "PyTorch", False),
    ("torch_cuda", "CUDA build", False),
    ("torch_hip", "ROCm build", True),
    ("cuda_runtime", "CUDA runtime", False),
    ("cudnn", "cuDNN", False),
    ("nccl", "NCCL", False),
    ("nvidia_driver", "NVIDIA driver", False),
    ("gpu_models", "GPU model", False),
    ("python", "Python", False),
    ("os", "OS", False),
    ("libc", "libc", False),
    ("gcc", "GCC", False),
    ("clang", "Clang", True),
    ("cmake", "CMake", True),
)

# What only a project using PyTorch (the first) or GPU code at all (the second) needs compared.
_TORCH_FIELDS = frozenset({"torch", "torch_cuda", "torch_hip", "cudnn", "nccl"})
_GPU_FIELDS = frozenset({"cuda_runtime", "nvidia_driver", "gpu_models"})

# Differences worth a line of advice to the contributor, most decisive first.
_ADVISED = ("torch", "torch_cuda", "cuda_runtime", "cudnn", "nccl", "python", "gpu_models")
_MAX_DIFF_ADVICE = 3

_CONFIG_FIELDS = frozenset(ENV_FACT_FIELDS) - {"packages"}
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION_HEAD = re.compile(r"\d+(?:\.\d+)*")
_ARCH_SUFFIX = re.compile(r"\s*\((?:x86_64|aarch64|arm64|amd64|ppc64le|s390x)\)\s*$", re.IGNORECASE)
_SEPARATORS = re.compile(r"[-_]+")

# --- version comparison ---------------------------------------------------------------------------


PASTE_ADVICE = (
    "No environment was pasted: add the output of `python -m torch.utils.collect_env` to the "
    "PR description (inside a ``` block) so this table can compare your setup with CI's."
)


def _split_local(version: str) -> tuple[str, str | None]:
    public, sep, local = version.strip().lower().partition("+")
    # pip writes cpu-cxx11-abi as cpu.cxx11.abi; compare the two spellings as one.
    return public.removeprefix("v"), _SEPARATORS.sub(".", local) if sep else None


def _public_match(a: str, b: str) -> bool:
    """Equal, or one is a purely numeric prefix of the other ("12.1" vs "12.1.105")."""
    if a == b:
        return True
    left, right = a.split("."), b.split(".")
    short, long_ = (left, right) if len(left) <= len(right) else (right, left)
    if long_[: len(short)] != short:
        return False
    return all(part.isdigit() for part in long_[len(short) :])


def versions_match(a: str, b: str) -> bool:
    """Compare two versions at the precision both give; local tags count only when both have one."""
    public_a, local_a = _split_local(a)
    public_b, local_b = _split_local(b)
    if not _public_match(public_a, public_b):
        return False
    return local_a is None or local_b is None or local_a == local_b


def cudnn_dotted(value: str) -> str:
    """``8902`` → ``8.9.2`` and ``90100`` → ``9.1.0`` (``torch.backends.cudnn.version()`` form)."""
    text = value.strip()
    if not text.isdigit() or len(text) < 4:
        return text
    number = int(text)
    if number >= 10000:  # cuDNN 9 switched to major*10000 + minor*100 + patch
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"


def _cudnn_candidates(value: str) -> list[str]:
    body = value.removeprefix("one of ")
    return [cudnn_dotted(part) for part in body.split(", ")] if body != value else [cudnn_dotted(value)]


def _cudnn_verdict(a: str, b: str) -> ParityVerdict:
    left, right = _cudnn_candidates(a), _cudnn_candidates(b)
    hits = [x for x in left for y in right if versions_match(x, y)]
    if len(left) == 1 and len(right) == 1:
        return ParityVerdict.MATCH if hits else ParityVerdict.DIFFERS
    # "one of 8.9.2, 8.9.7": a hit is only a possibility, a miss is a certain difference.
    return ParityVerdict.UNKNOWN if hits else ParityVerdict.DIFFERS


def _named_version(value: str) -> tuple[str, str | None]:
    """``Ubuntu 22.04.4 LTS (x86_64)`` → (``ubuntu``, ``22.04.4``); ``glibc-2.35`` → (``glibc``, ``2.35``)."""
    text = _ARCH_SUFFIX.sub("", value).lower().replace("-", " ")
    match = _VERSION_HEAD.search(text)
    if match is None:
        return " ".join(text.split()), None
    return " ".join(text[: match.start()].split()), match.group(0)


def _os_like_verdict(a: str, b: str) -> ParityVerdict:
    name_a, version_a = _named_version(a)
    name_b, version_b = _named_version(b)
    if version_a is None or version_b is None:
        same = name_a == name_b
    else:
        same = name_a == name_b and _public_match(version_a, version_b)
    return ParityVerdict.MATCH if same else ParityVerdict.DIFFERS


def _gpu_key(models: list[str]) -> set[str]:
    # Old drivers say "Tesla T4", new ones "NVIDIA Tesla T4": the same card.
    return {" ".join(m.lower().removeprefix("nvidia ").split()) for m in models}


def _version_verdict(a: str, b: str) -> ParityVerdict:
    return ParityVerdict.MATCH if versions_match(a, b) else ParityVerdict.DIFFERS


_COMPARERS: dict[str, Callable[[str, str], ParityVerdict]] = {
    "cudnn": _cudnn_verdict,
    "os": _os_like_verdict,
    "libc": _os_like_verdict,
}


def compare_values(field: str, a: str | list[str] | None, b: str | list[str] | None) -> ParityVerdict:
    """Verdict for one field; UNKNOWN when either side is not known."""
    if a is None or b is None:
        return ParityVerdict.UNKNOWN
    if isinstance(a, list) or isinstance(b, list):
        left = a if isinstance(a, list) else [a]
        right = b if isinstance(b, list) else [b]
        return ParityVerdict.MATCH if _gpu_key(left) == _gpu_key(right) else ParityVerdict.DIFFERS
    return _COMPARERS.get(field, _version_verdict)(a, b)


# --- reading values -------------------------------------------------------------------------------


def _package(facts: EnvFacts, name: str) -> str | None:
    wanted = canonicalize_name(name)
    for key, version in facts.packages.items():
        if canonicalize_name(key) == wanted:
            return version
    if wanted == "torch":
        return facts.torch
    return None


def _raw(facts: EnvFacts | None, field: str) -> str | list[str] | None:
    if facts is None:
        return None
    if field.startswith(PKG_PREFIX):
        return _package(facts, field.removeprefix(PKG_PREFIX))
    value = getattr(facts, field)
    return value if value is None or isinstance(value, list) else str(value)


def _display(value: str | list[str] | None) -> str | None:
    if not isinstance(value, list):
        return value
    counts = Counter(value)
    return ", ".join(name if n == 1 else f"{n}× {name}" for name, n in counts.items())


def _row(
    field: str,
    label: str,
    reference: EnvFacts | None,
    this_run: EnvFacts | None,
    contributor: EnvFacts | None,
) -> ParityRow:
    ref, run, mine = _raw(reference, field), _raw(this_run, field), _raw(contributor, field)
    ci = run if run is not None else ref
    return ParityRow(
        field=field,
        label=label,
        reference=_display(ref),
        this_run=_display(run),
        contributor=_display(mine),
        verdict=compare_values(field, ref, run),
        contributor_verdict=compare_values(field, mine, ci),
    )


# --- advice ---------------------------------------------------------------------------------------


def _backend(facts: EnvFacts) -> str | None:
    """cuda, rocm or cpu when the facts say so; None when they do not tell."""
    if facts.torch_hip:
        return "rocm"
    if facts.torch_cuda:
        return "cuda"
    torch = (facts.torch or "").lower()
    if "+cpu" in torch or (facts.torch is not None and facts.cuda_available is False):
        return "cpu"
    return None


def _ci_facts(reference: EnvFacts | None, this_run: EnvFacts | None) -> EnvFacts | None:
    if this_run is None or reference is None:
        return this_run or reference
    merged = reference.model_dump()
    merged.update({k: v for k, v in this_run.model_dump().items() if v not in (None, [], {})})
    return EnvFacts.model_validate(merged)


def _backend_advice(contributor: EnvFacts, ci: EnvFacts) -> str | None:
    """One line when the contributor ran a different kind of build (CPU, ROCm, CUDA) than CI."""
    mine, theirs = _backend(contributor), _backend(ci)
    if theirs == "cuda":
        stack = f"CUDA {ci.torch_cuda}" + (f" on {_display(ci.gpu_models)}" if ci.gpu_models else "")
        if mine == "rocm":
            return (
                f"You ran a ROCm build (HIP {contributor.torch_hip}) and CI runs {stack}: kernels and "
                "tolerances differ between the two, so run the repro command in the container above."
            )
        if mine == "cpu":
            return (
                f"Your PyTorch has no CUDA support and CI runs {stack}: GPU code paths were not "
                "exercised locally, so run the repro command in the container above to test them."
            )
        if mine == "cuda" and contributor.cuda_available is False:
            return (
                f"Your PyTorch is built with CUDA {contributor.torch_cuda} but saw no GPU "
                "(Is CUDA available: False), so GPU tests were skipped on your machine; "
                "run the repro command in the container above to run them."
            )
    elif theirs == "rocm" and mine in ("cuda", "cpu"):
        return (
            f"CI runs a ROCm build (HIP {ci.torch_hip}) and you ran a {mine.upper()} one: run the "
            "repro command in the container above to test with CI's stack."
        )
    return None


def _difference_advice(rows: list[ParityRow]) -> list[Advice]:
    """A line for each decisive difference (a few at most), then one line naming the rest."""
    differing = [r for r in rows if r.contributor_verdict == ParityVerdict.DIFFERS]
    decisive = [r for field in _ADVISED for r in differing if r.field == field][:_MAX_DIFF_ADVICE]
    advice = [
        Advice(
            kind=AdviceKind.DIFFERENCE,
            text=f"Your {r.label} {r.contributor} differs from CI's "
            f"{r.this_run if r.this_run is not None else r.reference}: "
            "run the repro command in the container above to test with CI's stack.",
        )
        for r in decisive
    ]
    rest = [r.label for r in differing if r not in decisive]
    if rest:
        advice.append(
            Advice(kind=AdviceKind.OTHER_DIFFERENCES, text="Also different from CI: " + ", ".join(rest) + ".")
        )
    return advice


def _drift_advice(rows: list[ParityRow]) -> str | None:
    drifted = [r for r in rows if r.verdict == ParityVerdict.DIFFERS]
    if not drifted:
        return None
    listed = ", ".join(f"{r.label} {r.this_run} (pinned {r.reference})" for r in drifted)
    return (
        f"This run differs from the pinned CI reference: {listed}. The image may have drifted; "
        "update the image or `parity.reference` in .github/paritybot.yml."
    )


def build_parity(
    reference: EnvFacts | None,
    this_run: EnvFacts | None,
    contributor: EnvFacts | None,
    packages: list[str],
    stack: ProjectStack | None = None,
) -> ParityReport:
    """The parity table and a few concrete lines of advice.

    ``stack``: what the project uses; PyTorch's rows are left out for a project without PyTorch,
    the GPU's for one without GPU code, unless the pinned reference or the contributor's paste
    gives them a value. None: every row.
    """
    rows: list[ParityRow] = []
    left_out: list[str] = []
    for field, label, optional in _ROWS:
        row = _row(field, label, reference, this_run, contributor)
        if optional and row.reference is None and row.this_run is None and row.contributor is None:
            continue
        unused = stack is not None and (
            (field in _TORCH_FIELDS and not stack.torch) or (field in _GPU_FIELDS and not stack.gpu)
        )
        if unused and row.reference is None and row.contributor is None:
            left_out.append(label)
            continue
        rows.append(row)
    seen: set[str] = set()
    for name in packages:
        key = canonicalize_name(name)
        if key not in seen:
            seen.add(key)
            rows.append(_row(PKG_PREFIX + name, name, reference, this_run, contributor))

    advice: list[Advice] = []
    uses_torch = stack is None or stack.torch
    if left_out:
        uses = "PyTorch" if stack is not None and stack.gpu else "PyTorch or a GPU library"
        text = f"Not compared ({', '.join(left_out)}): the project neither depends on nor imports {uses}."
        advice.append(Advice(kind=AdviceKind.SCOPE, text=text))
    if contributor is None:
        advice += [Advice(kind=AdviceKind.PASTE, text=PASTE_ADVICE)] if uses_torch else []
    else:
        ci = _ci_facts(reference, this_run)
        backend = _backend_advice(contributor, ci) if ci is not None else None
        advice += [Advice(kind=AdviceKind.BACKEND, text=backend)] if backend else []
        advice += _difference_advice(rows)
    drift = _drift_advice(rows)
    advice += [Advice(kind=AdviceKind.DRIFT, text=drift)] if drift else []
    return ParityReport(
        rows=rows, advice=advice, contributor_pasted=contributor is not None, uses_torch=uses_torch
    )


# --- the pinned reference from .github/paritybot.yml ----------------------------------------------


def _config_value(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"parity.reference.{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def reference_from_config(d: dict[str, str]) -> EnvFacts:
    """EnvFacts from the config's ``parity.reference`` mapping.

    Keys are EnvFacts fields (``torch``, ``torch_cuda``, ``cuda_runtime``, ``cudnn``, ``nccl``,
    ``nvidia_driver``, ``gpu_models`` comma-separated, ``python``, ``os``, ``libc``, ``gcc`` ...);
    ``pkg:NAME`` or any other package name pins a package. A key that is neither a field nor a
    valid package name, or that looks like a misspelt field, raises ValueError naming it.
    """
    fields: dict[str, object] = {}
    packages: dict[str, str] = {}
    for key, raw in d.items():
        value = _config_value(key, raw)
        if key.startswith(PKG_PREFIX):
            name = key.removeprefix(PKG_PREFIX)
            if not _PACKAGE_NAME.fullmatch(name):
                raise ValueError(f"parity.reference: {key!r} does not name a package")
            packages[canonicalize_name(name)] = value
        elif key in _CONFIG_FIELDS:
            fields[key] = _field_value(key, value)
        elif key in EnvFacts.model_fields:
            raise ValueError(f"parity.reference: {key!r} cannot be pinned")
        elif close := difflib.get_close_matches(key, sorted(_CONFIG_FIELDS), n=1, cutoff=0.8):
            raise ValueError(
                f"parity.reference: unknown key {key!r}; did you mean {close[0]!r}? "
                f"(write 'pkg:{key}' to pin a package of that name)"
            )
        elif _PACKAGE_NAME.fullmatch(key):
            packages[canonicalize_name(key)] = value
        else:
            raise ValueError(f"parity.reference: unknown key {key!r}: neither a field nor a package name")
    return EnvFacts.model_validate({"source": "config", **fields, "packages": packages})


def _field_value(key: str, value: str) -> object:
    if key == "gpu_models":
        models = [m.strip() for m in value.split(",") if m.strip()]
        if not models:
            raise ValueError(f"parity.reference.gpu_models: no GPU model in {value!r}")
        return models
    if key == "cuda_available":
        lowered = value.lower()
        if lowered not in {"true", "false", "yes", "no"}:
            raise ValueError(f"parity.reference.cuda_available: expected true or false, got {value!r}")
        return lowered in {"true", "yes"}
    return value

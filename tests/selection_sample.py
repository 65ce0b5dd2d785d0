"""A small package for the test-selection tests: its root re-exports everything, as real ones do.

``SAMPLE`` is the base commit's tree; :func:`build_coverage_map` runs its suite for real under
the coverage step, through the host runner.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bot.core.config import TestSettings
from runner.backends.host import HostRunner
from runner.selection.coverage_map import CoverageMap, coverage_map_from_step, coverage_step

SAMPLE: dict[str, str | bytes | None] = {
    "pyproject.toml": (
        '[project]\nname = "shapes"\nversion = "0.1"\n\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["src"]\n'
    ),
    "README.md": "# shapes\n",
    "src/shapes/__init__.py": (
        '"""Shapes: the root re-exports every public name."""\n'
        "from .consts import FACTOR, LIMIT\n"
        "from .ops import clamp, scale, shift\n"
        "from .stats import mean, spread\n"
        "from .text import shout\n"
        "\n"
        '__all__ = ["FACTOR", "LIMIT", "clamp", "mean", "scale", "shift", "shout", "spread"]\n'
    ),
    "src/shapes/consts.py": "FACTOR = 2\nLIMIT = FACTOR * 50\n",
    "src/shapes/ops.py": (
        "from .consts import FACTOR, LIMIT\n"
        "\n"
        "\n"
        "def scale(x):\n"
        "    return x * FACTOR\n"
        "\n"
        "\n"
        "def shift(x, by=1):\n"
        "    return x + by\n"
        "\n"
        "\n"
        "def clamp(x):\n"
        "    if x > LIMIT:\n"
        "        return LIMIT\n"
        "    return x\n"
    ),
    "src/shapes/stats.py": (
        "def mean(values):\n"
        "    if not values:\n"
        '        raise ValueError("mean of nothing")\n'
        "    return sum(values) / len(values)\n"
        "\n"
        "\n"
        "def spread(values):\n"
        "    return max(values) - min(values)\n"
    ),
    "src/shapes/text.py": 'def shout(word):\n    return word.upper() + "!"\n',
    "tests/conftest.py": ("import pytest\n\n\n@pytest.fixture\ndef numbers():\n    return [1, 2, 3]\n"),
    "tests/test_ops.py": (
        "import pytest\n"
        "\n"
        "from shapes import clamp, scale, shift\n"
        "\n"
        "\n"
        "def test_scale():\n"
        "    assert scale(3) == 6\n"
        "\n"
        "\n"
        '@pytest.mark.parametrize("x, expected", [(1, 2), (5, 6)])\n'
        "def test_shift(x, expected):\n"
        "    assert shift(x) == expected\n"
        "\n"
        "\n"
        "class TestClamp:\n"
        "    def test_below(self):\n"
        "        assert clamp(5) == 5\n"
        "\n"
        "    def test_above(self):\n"
        "        assert clamp(1000) == 100\n"
    ),
    "tests/test_stats.py": (
        "import shapes\n"
        "\n"
        "\n"
        "def test_mean(numbers):\n"
        "    assert shapes.mean(numbers) == 2\n"
        "\n"
        "\n"
        "def test_spread():\n"
        "    assert shapes.spread([1, 5]) == 4\n"
    ),
    "tests/test_text.py": (
        "import pytest\n"
        "\n"
        "from shapes import shout\n"
        "\n"
        "\n"
        '@pytest.mark.parametrize("word", ["hi", "a b", "x::y"])\n'
        "def test_shout(word):\n"
        '    assert shout(word).endswith("!")\n'
    ),
}

ALL_TESTS = [
    "tests/test_ops.py::test_scale",
    "tests/test_ops.py::test_shift[1-2]",
    "tests/test_ops.py::test_shift[5-6]",
    "tests/test_ops.py::TestClamp::test_below",
    "tests/test_ops.py::TestClamp::test_above",
    "tests/test_stats.py::test_mean",
    "tests/test_stats.py::test_spread",
    "tests/test_text.py::test_shout[hi]",
    "tests/test_text.py::test_shout[a b]",
    "tests/test_text.py::test_shout[x::y]",
]


def host_runner() -> HostRunner:
    """A host runner whose ``python`` is this interpreter (it has pytest and coverage)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return HostRunner(env={"PATH": path, "PYTHONDONTWRITEBYTECODE": "1"})


async def build_coverage_map(workspace: Path, commit: str | None = None) -> CoverageMap:
    result = await host_runner().run(coverage_step(TestSettings()), workspace)
    return coverage_map_from_step(result, commit)

"""The docstring check: exactly the public API a change touches, in the repository's style."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest
from gitrepo import GitRepo

from bot.core.config import DocstringSettings
from bot.core.models import CheckStatus, Level
from runner.checks.docstrings import (
    check_docstrings,
    check_module,
    choose_style,
    docstring_style,
    vote_styles,
)


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def all_lines(text: str) -> set[int]:
    return set(range(1, text.count("\n") + 2))


def messages(path: str, new: str, style: str = "google", old: str | None = None, **kw: bool) -> list[str]:
    lines = all_lines(new)
    return [f.message for f in check_module(path, old, new, lines, style, **kw)]


# --- Through git: only what the change touches -----------------------------------------------------

BASE_OPS = src(
    '''
    """Operations."""


    def untouched(x):
        return x


    def scale(value, factor):
        """Scale a value.

        Args:
            value: the value.
            factor: how much.

        Returns:
            The product.
        """
        return value * factor
    '''
)


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


def test_only_the_changed_public_api_is_flagged(repo: GitRepo) -> None:
    base = repo.commit({"mypkg/__init__.py": "", "mypkg/ops.py": BASE_OPS})
    repo.git("checkout", "-q", "-b", "feature")
    head_ops = BASE_OPS.replace("(value, factor):", "(value, ratio):").replace(
        "return value * factor", "return value * ratio"
    ) + src(
        """


        def added(a, b):
            return a + b


        def _private_impl(a):
            return a
        """
    )
    head = repo.commit(
        {
            "mypkg/ops.py": head_ops,
            "mypkg/_impl.py": "def hidden(x):\n    return x\n",
            "tests/test_ops.py": "def test_added():\n    assert True\n",
            "docs/conf.py": "def setup(app):\n    return app\n",
        }
    )

    result = check_docstrings(repo.path, base, head, DocstringSettings(style="google"))

    assert result.status == CheckStatus.FAILED
    assert result.checked == 2  # scale (changed) and added (new); untouched and private are not
    found = sorted((f.line, f.title, f.message) for f in result.findings)
    added_line = head_ops.splitlines().index("def added(a, b):") + 1
    assert found == [
        (8, "Undocumented parameter", "`mypkg.ops.scale()` does not document parameter `ratio`"),
        (
            8,
            "Unknown parameter in docstring",
            "`mypkg.ops.scale()` documents `factor` but has no such parameter",
        ),
        (added_line, "Missing docstring", "`mypkg.ops.added()` has no docstring"),
    ]
    assert all(f.path == "mypkg/ops.py" and f.level == Level.WARNING for f in result.findings)


def test_documented_change_passes_and_reformatting_is_not_a_change(repo: GitRepo) -> None:
    base = repo.commit({"mypkg/ops.py": BASE_OPS})
    # Reformatting an undocumented function does not make the PR responsible for it.
    reformatted = BASE_OPS.replace("def untouched(x):\n    return x", "def untouched( x ):\n    return (x)")
    head = repo.commit({"mypkg/ops.py": reformatted})

    result = check_docstrings(repo.path, base, head, DocstringSettings(style="google"))

    assert (result.status, result.checked, result.findings) == (CheckStatus.PASSED, 0, [])


def test_a_deleted_statement_marks_its_function(repo: GitRepo) -> None:
    text = "def work(x):\n    y = x + 1\n    print(y)\n    return y\n"
    base = repo.commit({"pkg/mod.py": text})
    head = repo.commit({"pkg/mod.py": text.replace("    print(y)\n", "")})  # a pure deletion

    result = check_docstrings(repo.path, base, head, DocstringSettings(style="google"))

    assert [f.message for f in result.findings] == ["`pkg.mod.work()` has no docstring"]


def test_file_that_does_not_parse_is_a_finding_not_a_crash(repo: GitRepo) -> None:
    base = repo.commit({"pkg/mod.py": "def ok():\n    '''Fine.'''\n"})
    head = repo.commit({"pkg/mod.py": "def ok():\n    '''Fine.'''\n\ndef broken(:\n    pass\n"})

    result = check_docstrings(repo.path, base, head, DocstringSettings())

    assert result.status == CheckStatus.FAILED
    assert [(f.line, f.title) for f in result.findings] == [(4, "Syntax error")]


def test_settings_exclude_globs_are_honoured(repo: GitRepo) -> None:
    base = repo.commit({"README.md": "x\n"})
    head = repo.commit({"scripts/tool.py": "def run(x):\n    return x\n", "pkg/m.py": "def f():\n    pass\n"})

    result = check_docstrings(repo.path, base, head, DocstringSettings(exclude=["scripts/*"]))

    assert [f.path for f in result.findings] == ["pkg/m.py"]


def test_bad_revision_gives_an_error_result(repo: GitRepo) -> None:
    repo.commit({"a.py": "x = 1\n"})

    result = check_docstrings(repo.path, "no-such-branch", "HEAD", DocstringSettings())

    assert result.status == CheckStatus.ERROR
    assert "no-such-branch" in result.message


def test_style_is_detected_from_the_repository(repo: GitRepo) -> None:
    numpy_doc = '''    """Thing {i}.

    Parameters
    ----------
    x : int
        The x.
    """
'''
    existing = "".join(f"def thing{i}(x):\n{numpy_doc.format(i=i)}    return None\n\n" for i in range(6))
    base = repo.commit({"pkg/existing.py": existing})
    new = src(
        '''
        def fresh(a, b):
            """Fresh.

            Parameters
            ----------
            a : int
                The a.
            """
        '''
    )
    head = repo.commit({"pkg/new.py": new})

    result = check_docstrings(repo.path, base, head, DocstringSettings())

    assert result.style == "numpy"
    assert [f.message for f in result.findings] == ["`pkg.new.fresh()` does not document parameter `b`"]


# --- The rules, on source text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("style", "doc"),
    [
        ("google", "Scale.\n\n    Args:\n        value: v.\n        factor: f.\n"),
        (
            "numpy",
            "Scale.\n\n    Parameters\n    ----------\n"
            "    value : float\n        v.\n    factor : float\n        f.\n",
        ),
        ("rest", "Scale.\n\n    :param value: v.\n    :param factor: f.\n"),
    ],
)
def test_param_mismatch_in_each_style(style: str, doc: str) -> None:
    new = f'def scale(value, ratio):\n    """{doc}    """\n'
    assert messages("mypkg/ops.py", new, style) == [
        "`mypkg.ops.scale()` does not document parameter `ratio`",
        "`mypkg.ops.scale()` documents `factor` but has no such parameter",
    ]
    matching = new.replace("ratio", "factor")
    assert messages("mypkg/ops.py", matching, style) == []


def test_numpy_combined_names_and_star_args() -> None:
    new = src(
        '''
        def f(x, y, *args, **kwargs):
            """F.

            Parameters
            ----------
            x, y : int
                Coordinates.
            *args
                Extra.
            """
        '''
    )
    assert messages("p/m.py", new, "numpy") == []
    # **kwargs need not be documented, but a documented *args the function lacks is wrong.
    lacking = new.replace(", *args, **kwargs", "")
    assert messages("p/m.py", lacking, "numpy") == ["`p.m.f()` documents `*args` but has no such parameter"]


def test_returns_yields_and_raises() -> None:
    new = src(
        '''
        def value(x):
            """Compute.

            Args:
                x: input.
            """
            if x:
                raise ValueError("no")
            return x + 1


        def nothing(x) -> None:
            """Do.

            Args:
                x: input.
            """
            return None


        def items(n):
            """Produce.

            Args:
                n: count.
            """
            yield from range(n)


        def short(x):
            """Returns x doubled.

            Args:
                x: input.
            """
            return 2 * x


        def abstract(x):
            """Abstract.

            Args:
                x: input.
            """
            raise NotImplementedError
        '''
    )
    assert messages("p/m.py", new, require_raises=True) == [
        "`p.m.value()` returns a value but its docstring has no Returns section",
        "`p.m.value()` raises `ValueError` but its docstring does not document it",
        "`p.m.items()` is a generator but its docstring has no Yields section",
    ]
    assert messages("p/m.py", new, require_returns=False) == []


def test_class_parameters_may_live_in_the_class_or_init_docstring() -> None:
    in_class = src(
        '''
        class Box:
            """A box.

            Args:
                size: how big.
            """

            def __init__(self, size, colour="red"):
                self.size = size
        '''
    )
    assert messages("p/m.py", in_class) == [
        "`p.m.Box` does not document parameter `colour` (in the class or `__init__` docstring)"
    ]
    in_init = in_class.replace(
        "self.size = size", '"""Make.\n\n        Args:\n            colour: c.\n        """'
    )
    assert messages("p/m.py", in_init) == []


def test_properties_overloads_dunders_and_overrides_are_treated_sensibly() -> None:
    new = src(
        '''
        import typing


        class Thing:
            """A thing."""

            @property
            def size(self):
                """How big."""
                return 3

            @size.setter
            def size(self, value):
                pass

            def __repr__(self):
                return "Thing()"

            @typing.override
            def run(self, x):
                return x

            @typing.overload
            def get(self, i: int) -> int: ...
            @typing.overload
            def get(self, i: str) -> str: ...
            def get(self, i):
                """Get.

                Args:
                    i: index.

                Returns:
                    The item.
                """
                return i

            @property
            def undocumented(self):
                return 1
        '''
    )
    assert messages("p/m.py", new) == ["`p.m.Thing.undocumented` has no docstring"]


def test_all_limits_what_is_checked() -> None:
    new = '__all__ = ["api"]\n\n\ndef api():\n    """Api."""\n\n\ndef unlisted(x):\n    return x\n'
    assert messages("p/m.py", new) == []


def test_tests_and_private_modules_are_never_checked() -> None:
    undocumented = "def f(x):\n    return x\n"
    for path in ["tests/test_m.py", "p/_private.py", "p/tests/util.py", "conftest.py"]:
        assert messages(path, undocumented) == [], path


def test_a_docstring_in_another_style_is_read_in_that_style() -> None:
    new = 'def f(x):\n    """F.\n\n    :param x: the x.\n    """\n'
    assert messages("p/m.py", new, "google") == []


def test_style_votes() -> None:
    google = 'def f(x):\n    """F.\n\n    Args:\n        x: y.\n    """\n'
    rest = 'def g(x):\n    """G.\n\n    :param x: y.\n    """\n'
    assert docstring_style("Just a summary.") is None
    assert vote_styles([google, google, rest, "def broken(:"]) == Counter({"google": 2, "rest": 1})
    assert choose_style(Counter()) == "google"
    assert choose_style(Counter({"rest": 3, "numpy": 1})) == "rest"


# --- Markup no style reads, the project's declared convention, inherited docstrings ---------------

MARKDOWN_DOC = src(
    '''
    def scale(value, factor):
        """Scale a value.

        **Parameters:**

        - **value** (`float`) -- the value.
        - **factor** (`float`) -- how much.

        **Returns:** the product.
        """
        return value * factor
    '''
)


@pytest.mark.parametrize("style", ["google", "numpy", "rest"])
def test_sections_in_a_markup_no_style_reads_are_never_reported_missing(style: str) -> None:
    assert messages("pkg/ops.py", MARKDOWN_DOC, style) == []
    # A docstring with no sections at all still has its parameters reported.
    bare = src(
        '''
        def scale(value, factor):
            """Returns the value scaled by the factor."""
            return value * factor
        '''
    )
    assert messages("pkg/ops.py", bare, style) == [
        "`pkg.ops.scale()` does not document parameters `value`, `factor`"
    ]


NUMPY_DOC = src(
    '''
    def fresh(a, b):
        """Fresh.

        Parameters
        ----------
        a : int
            The a.
        b : int
            The b.
        """
    '''
)


@pytest.mark.parametrize(
    ("path", "text", "where"),
    [
        ("pyproject.toml", '[tool.ruff.lint.pydocstyle]\nconvention = "numpy"\n', "pyproject.toml"),
        ("ruff.toml", '[lint.pydocstyle]\nconvention = "numpy"\n', "ruff.toml"),
        ("setup.cfg", "[pydocstyle]\nconvention = numpy\n", "setup.cfg"),
        ("pyproject.toml", "[tool.numpydoc_validation]\nchecks = ['all']\n", "pyproject.toml"),
        ("docs/conf.py", "extensions = ['numpydoc']\n", "docs/conf.py"),
    ],
)
def test_the_convention_the_project_declares_beats_the_vote(
    repo: GitRepo, path: str, text: str, where: str
) -> None:
    google = '    """Thing.\n\n    Args:\n        x: The x.\n    """\n'
    existing = "".join(f"def thing{i}(x):\n{google}    return None\n\n" for i in range(6))
    base = repo.commit({"pkg/existing.py": existing, path: text})  # the docstrings vote google
    head = repo.commit({"pkg/new.py": NUMPY_DOC})

    result = check_docstrings(repo.path, base, head, DocstringSettings())

    assert result.style == "numpy"
    assert f"(numpy style, as {where} declares)" in result.message
    assert result.findings == []


def test_an_override_inherits_its_documented_base_method_s_docstring(repo: GitRepo) -> None:
    base_module = src(
        '''
        class Base:
            """A base."""

            def forward(self, x):
                """Run it.

                Args:
                    x: The input.

                Returns:
                    The output.
                """
                raise NotImplementedError
        '''
    )
    override = src(
        '''
        from pkg.base import Base as Parent
        from . import base


        class Model(Parent):
            """A model."""

            def forward(self, x):
                return x * 2

            def extra(self, y):
                return y


        class Deeper(Model):
            """Two levels down, through another import form."""

            def forward(self, x):
                return x


        class Other(base.Base):
            """Through the module."""

            def forward(self, x):
                return -x
        '''
    )
    start = repo.commit({"pkg/__init__.py": "", "pkg/base.py": base_module})
    head = repo.commit({"src_marker.txt": "", "pkg/model.py": override})

    result = check_docstrings(repo.path, start, head, DocstringSettings(style="google"))

    # Only the method no base documents is missing; the overrides read Base.forward's.
    assert [f.message for f in result.findings] == ["`pkg.model.Model.extra()` has no docstring"]

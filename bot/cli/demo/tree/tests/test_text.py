import pytest
from calc.text import initials, shout


@pytest.mark.parametrize("word", ["hi", "a b", "x::y", "dot.ted"])
def test_shout_ends_with_bang(word: str) -> None:
    assert shout(word).endswith("!")


def test_shout_upper() -> None:
    assert shout("hey") == "HEY!"


def test_initials() -> None:
    assert initials("Ada Lovelace") == "AL"


def test_initials_single() -> None:
    assert initials("plato") == "P"

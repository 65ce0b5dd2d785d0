from calc.stats import mean
from calc.text import initials


class TestOuter:
    class TestInner:
        def test_mean_is_between(self) -> None:
            assert 1 <= mean([1, 9]) <= 9

    def test_initials_of_three(self) -> None:
        assert initials("a b c") == "ABC"


def test_module_level() -> None:
    assert mean([0.5, 1.5]) == 1.0

import pytest
from calc.stats import mean, spread


class TestMean:
    def test_mean_of_integers(self) -> None:
        assert mean([1, 2, 3]) == 2

    def test_mean_of_halves(self) -> None:
        assert mean([1, 2, 3, 4]) == 2.5

    def test_mean_of_one(self) -> None:
        assert mean([7]) == 7

    def test_empty_raises(self) -> None:
        with pytest.raises(ValueError):
            mean([])


@pytest.mark.parametrize(("values", "expected"), [([1, 5], 4), ([2.5, 2.5], 0), ([-1, 1], 2)])
def test_spread(values: list[float], expected: float) -> None:
    assert spread(values) == expected

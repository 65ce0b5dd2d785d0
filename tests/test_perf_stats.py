"""The verdict on a benchmark's rounds: regression, improvement, within noise, too few rounds, error."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.perf import BenchmarkError, BenchmarkSamples, PerfThresholds, Round, Side, Verdict
from runner.perf.stats import compare, cut_count, fastest_count, ratio_interval

LIMITS = PerfThresholds(threshold=0.05)


def samples(base: list[float], head: list[float], **kw: object) -> BenchmarkSamples:
    rounds = [
        Round(base=b, head=h, first=Side.BASE if i % 2 == 0 else Side.HEAD)
        for i, (b, h) in enumerate(zip(base, head, strict=True))
    ]
    return BenchmarkSamples.model_validate(
        {"kind": "pytest", "name": "tests/test_x.py::test_x", "rounds": rounds, **kw}
    )


def noisy_rounds(
    ratio: float, count: int, noise: float, seed: int = 0, drift: float = 0.2, disturbed: float = 0.0
) -> tuple[list[float], list[float]]:
    """Rounds on a machine whose speed drifts by up to ``drift`` and whose rounds jitter by ``noise``;
    a neighbour makes a ``disturbed`` share of each side's rounds 3 to 10 times slower."""
    rng = random.Random(seed)

    def neighbour() -> float:
        return rng.uniform(3, 10) if rng.random() < disturbed else 1.0

    base, head = [], []
    for i in range(count):
        machine = 1e-3 * (1 + drift * (math.sin(i / 5) + 1) / 2)  # drift hits both sides of a round
        base.append(machine * rng.lognormvariate(0, noise) * neighbour())
        head.append(machine * ratio * rng.lognormvariate(0, noise) * neighbour())
    return base, head


def test_a_clear_slowdown_is_a_regression_on_a_drifting_machine():
    result = compare(samples(*noisy_rounds(1.20, 40, 0.02)), LIMITS)
    assert result.verdict is Verdict.REGRESSION
    assert result.low is not None and result.low > 1.05
    assert result.low < result.ratio < result.high  # type: ignore[operator]
    assert result.rounds == 40
    assert "slower by more than 5%" in result.reason


def test_rounds_a_neighbour_slowed_on_either_side_do_not_hide_a_slowdown():
    # A third of each side's rounds several times slower, at random: half the pairs have a disturbed
    # side, which left the median of the paired ratios nothing to stand on.
    result = compare(samples(*noisy_rounds(1.10, 60, 0.02, drift=0.1, disturbed=1 / 3)), LIMITS)
    assert result.verdict is Verdict.REGRESSION
    assert result.ratio is not None and 1.07 < result.ratio < 1.13


def test_nor_do_they_make_a_regression_of_no_change():
    result = compare(samples(*noisy_rounds(1.0, 100, 0.02, drift=0.1, disturbed=1 / 3, seed=1)), LIMITS)
    assert result.verdict is Verdict.WITHIN_NOISE


def test_a_machine_that_drifts_more_than_the_change_widens_the_interval_never_invents_a_change():
    for seed in range(20):
        result = compare(samples(*noisy_rounds(1.0, 40, 0.02, seed=seed, drift=0.8, disturbed=0.3)), LIMITS)
        assert result.verdict in (Verdict.WITHIN_NOISE, Verdict.TOO_FEW_ROUNDS)
        assert result.low is not None and result.high is not None and result.low <= 1 <= result.high


def test_a_clear_speed_up_is_an_improvement():
    result = compare(samples(*noisy_rounds(0.80, 40, 0.02)), LIMITS)
    assert result.verdict is Verdict.IMPROVEMENT
    assert result.high is not None and result.high < 1 / 1.05


def test_no_change_under_noise_is_within_noise_not_a_regression():
    result = compare(samples(*noisy_rounds(1.0, 60, 0.03)), LIMITS)
    assert result.verdict is Verdict.WITHIN_NOISE
    assert result.low is not None and result.high is not None
    assert 1 / 1.05 <= result.low <= 1 <= result.high <= 1.05


def test_a_small_real_change_below_the_threshold_is_within_noise():
    result = compare(samples(*noisy_rounds(1.02, 60, 0.005)), LIMITS)
    assert result.verdict is Verdict.WITHIN_NOISE
    assert result.low is not None and result.low > 1  # measurable, yet not past the threshold


@pytest.mark.parametrize("count", [0, 1, 5])
def test_fewer_rounds_than_an_interval_needs_give_too_few_rounds(count):
    result = compare(samples(*noisy_rounds(1.5, count, 0.01)), LIMITS)
    assert result.verdict is Verdict.TOO_FEW_ROUNDS
    assert result.ratio is None
    assert f"{count} rounds" in result.reason


def test_an_interval_that_straddles_the_threshold_asks_for_more_rounds():
    result = compare(samples(*noisy_rounds(1.05, 8, 0.05, seed=3)), LIMITS)
    assert result.verdict is Verdict.TOO_FEW_ROUNDS
    assert result.low is not None and result.high is not None
    assert result.low <= 1.05 <= result.high
    assert "more rounds would tell" in result.reason


def test_a_benchmark_that_crashed_on_head_is_an_error_not_a_regression():
    base, head = noisy_rounds(3.0, 20, 0.01)
    crashed = samples(
        base, head, error=BenchmarkError(side=Side.HEAD, message="ZeroDivisionError: division by zero")
    )
    result = compare(crashed, LIMITS)
    assert result.verdict is Verdict.ERROR
    assert result.reason == "failed on head: ZeroDivisionError: division by zero"


def test_the_cut_follows_the_hypergeometric_law():
    # 4 rounds a side, the 4 fastest of the 8: all 4 from one side has probability 1/70 each way, so
    # the 95% interval runs from the fastest head over the slowest of base's 4 to the reverse
    # (coverage 68/70); with 3 rounds a side it would be 1/20 each way: no 95% interval.
    assert fastest_count(4, 0.95) == 4
    assert cut_count(4, 4, 0.95) == 1
    assert fastest_count(3, 0.95) is None
    assert ratio_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 0.95) is None
    # The estimate: the medians of each side's 4 fastest (geometric, between the 2nd and 3rd).
    assert ratio_interval([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 5.0, 7.0], 0.95) == pytest.approx(
        (math.sqrt(3.0 * 5.0 / (2.0 * 3.0)), 2.0 / 4.0, 7.0 / 1.0)
    )
    # 20 a side: the lowest tenth (4) has P(A = 0) = C(20,4)/C(40,4) = 0.053, so it takes 5.
    assert fastest_count(20, 0.95) == 5
    # 100 a side: the fastest 20 of 200; A has mean 10 and standard deviation 2.13, so the cut is
    # near 10 - 1.96 · 2.13 = 5.8.
    assert fastest_count(100, 0.95) == 20
    assert 5 <= cut_count(100, 20, 0.95) <= 7


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0)),
        min_size=6,
        max_size=40,
    )
)
def test_swapping_the_sides_inverts_the_ratio_and_its_interval(pairs):
    base = [b for b, _ in pairs]
    head = [h for _, h in pairs]
    forward = ratio_interval(base, head, 0.95)
    backward = ratio_interval(head, base, 0.95)
    assert forward is not None and backward is not None
    ratio, low, high = forward
    assert low <= ratio <= high
    assert math.isclose(ratio, 1 / backward[0], rel_tol=1e-9)
    assert math.isclose(low, 1 / backward[2], rel_tol=1e-9)
    assert math.isclose(high, 1 / backward[1], rel_tol=1e-9)


def test_the_median_times_are_reported_per_side():
    result = compare(samples([1e-3] * 6 + [2e-3], [2e-3] * 6 + [4e-3]), LIMITS)
    assert result.base_median == 1e-3
    assert result.head_median == 2e-3
    assert result.verdict is Verdict.REGRESSION

"""The verdict on a benchmark's paired rounds: regression, improvement, within noise, too few rounds, error."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.perf import BenchmarkError, BenchmarkSamples, PerfThresholds, Round, Side, Verdict
from runner.perf.stats import compare, cut_count, ratio_interval

LIMITS = PerfThresholds(threshold=0.05)


def samples(base: list[float], head: list[float], **kw: object) -> BenchmarkSamples:
    rounds = [
        Round(base=b, head=h, first=Side.BASE if i % 2 == 0 else Side.HEAD)
        for i, (b, h) in enumerate(zip(base, head, strict=True))
    ]
    return BenchmarkSamples.model_validate(
        {"kind": "pytest", "name": "tests/test_x.py::test_x", "rounds": rounds, **kw}
    )


def noisy_rounds(ratio: float, count: int, noise: float, seed: int = 0) -> tuple[list[float], list[float]]:
    """Rounds on a machine whose speed drifts by up to 80% and whose rounds jitter by ``noise``."""
    rng = random.Random(seed)
    base, head = [], []
    for i in range(count):
        machine = 1e-3 * (1 + 0.8 * (math.sin(i / 5) + 1) / 2)  # drift hits both sides of a round
        base.append(machine * rng.lognormvariate(0, noise))
        head.append(machine * ratio * rng.lognormvariate(0, noise))
    return base, head


def test_a_clear_slowdown_is_a_regression_even_on_a_drifting_machine():
    result = compare(samples(*noisy_rounds(1.20, 40, 0.02)), LIMITS)
    assert result.verdict is Verdict.REGRESSION
    assert result.low is not None and result.low > 1.05
    assert result.low < result.ratio < result.high  # type: ignore[operator]
    assert result.rounds == 40
    assert "slower by more than 5%" in result.reason


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


def test_the_cut_matches_the_signed_rank_tables():
    # Hollander, Wolfe & Chicken, Table A.4: for n = 10, P(T+ >= 47) = 0.024, so the 95% interval
    # runs from the 9th smallest to the 9th largest of the 55 Walsh averages; n = 6 is the fewest
    # rounds with a 95% interval (min to max, 96.9%).
    assert cut_count(10, 0.95) == 9
    assert cut_count(6, 0.95) == 1
    assert cut_count(5, 0.95) == 0
    # Beyond the exact range the normal approximation continues the exact values: from n to n + 1
    # the cut grows by about (n + 1) / 2 - 1.96 · d/dn sqrt(n(n+1)(2n+1)/24), some 41 at n = 100.
    assert 39 <= cut_count(101, 0.95) - cut_count(100, 0.95) <= 43


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

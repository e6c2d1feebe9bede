"""A repetition's mean and 95 % interval against Student's t from the published table."""

from __future__ import annotations

import math

import pytest

from coordinator.running.statistics import Estimate, estimate


def test_no_sample_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^no samples$"):
        estimate([])


def test_one_sample_is_its_own_interval() -> None:
    assert estimate([5.0]) == Estimate(1, 5.0, 0.0, (5.0, 5.0))


# t(0.975, n - 1) from the published table; from 31 degrees of freedom on, the normal 1.96.
@pytest.mark.parametrize(("n", "t"), [(2, 12.706), (3, 4.303), (11, 2.228), (30, 2.045), (31, 2.042), (32, 1.96)])
def test_the_half_width_is_t_times_the_standard_error(n: int, t: float) -> None:
    samples = [float(x) for x in range(n)]  # 0 .. n-1: mean (n-1)/2, variance n(n+1)/12
    mean = (n - 1) / 2
    stdev = math.sqrt(n * (n + 1) / 12)
    e = estimate(samples)
    assert (e.n, e.mean) == (n, mean)
    assert e.stdev == pytest.approx(stdev, rel=1e-12)
    half = t * stdev / math.sqrt(n)
    assert e.ci95 == pytest.approx((mean - half, mean + half), rel=1e-12)


def test_an_interval_ends_at_the_least_value_the_figure_can_have() -> None:
    # Two rates of 1 and 9: mean 5, s = 4 sqrt(2), half-width 12.706 * 4 = 50.824.
    assert estimate([1.0, 9.0]).ci95 == pytest.approx((5 - 50.824, 5 + 50.824), rel=1e-12)
    assert estimate([1.0, 9.0], least=0.0).ci95 == (0.0, pytest.approx(5 + 50.824, rel=1e-12))
    # An interval inside the range is left as it is.
    assert estimate([10.0, 12.0, 14.0], least=0.0) == estimate([10.0, 12.0, 14.0])


def test_the_record_as_a_plain_dict() -> None:
    # mean 12, s = 2, t(0.975, 2) = 4.303: half-width 4.303 * 2 / sqrt(3).
    half = 4.303 * 2 / math.sqrt(3)
    assert estimate([10.0, 12.0, 14.0]).to_json() == {
        "n": 3,
        "mean": 12.0,
        "stdev": 2.0,
        "ci95": [pytest.approx(12 - half, rel=1e-12), pytest.approx(12 + half, rel=1e-12)],
    }

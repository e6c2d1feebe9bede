from __future__ import annotations

import numpy as np
import pytest

from reports.change_points import ChangePoint, _best_split, change_points


def _noisy(n: int, seed: int, level: float = 10_000.0, noise: float = 0.02) -> np.ndarray:
    return level * (1 + np.random.default_rng(seed).uniform(-noise, noise, n))


def test_the_energy_statistic_of_a_hand_worked_split() -> None:
    # x = [0, 0, 3, 3], the only split with two values each side: the between-sum is 4 * 3 = 12
    # and both within-sums are 0, so Q = 2/4 * 12 = 6.
    q, tau = _best_split(np.array([0.0, 0.0, 3.0, 3.0]))
    assert (q, tau) == (6.0, 2)


def test_the_statistic_matches_its_definition_at_every_split() -> None:
    x = _noisy(9, seed=3)
    best = -np.inf
    # Two runs at least on each side of a split (MIN_RUNS).
    for tau in range(2, 9):
        for kappa in range(tau + 2, 10):
            a, b = x[:tau], x[tau:kappa]
            n, m = len(a), len(b)
            between = np.abs(a[:, None] - b[None, :]).sum()
            wa = np.abs(a[:, None] - a[None, :]).sum() / 2
            wb = np.abs(b[:, None] - b[None, :]).sum() / 2
            q = 2 * between / (n + m)
            q -= 2 * m * wa / ((n + m) * (n - 1)) + 2 * n * wb / ((n + m) * (m - 1))
            best = max(best, q)
    assert _best_split(x)[0] == pytest.approx(best)


@pytest.mark.parametrize("seed", range(5))
def test_a_ten_percent_drop_at_run_20_is_found_there(seed: int) -> None:
    series = _noisy(30, seed)
    series[20:] *= 0.9
    found = change_points(series)
    assert [c.index for c in found] == [20]
    assert found[0].p_value <= 0.01
    assert found[0].relative_change == pytest.approx(-0.1, abs=0.015)


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_has_no_change_point(seed: int) -> None:
    assert change_points(_noisy(30, seed)) == []


@pytest.mark.parametrize(("night", "factor"), [(12, 0.7), (25, 1.5), (0, 0.5), (29, 0.6)])
def test_one_outlier_night_is_no_change_point(night: int, factor: float) -> None:
    series = _noisy(30, seed=11)
    series[night] *= factor
    assert change_points(series) == []


def test_two_lasting_shifts_are_both_found() -> None:
    series = _noisy(45, seed=4)
    series[15:] *= 0.8
    series[30:] *= 1.5
    assert [c.index for c in change_points(series)] == [15, 30]


def test_a_change_must_last_two_runs() -> None:
    # Two nights at half the rate after 38 good ones: a change (two of 780 places for the pair
    # are as extreme). One such night is none, however long the history before it.
    assert [c.index for c in change_points([10.0] * 38 + [5.0] * 2)] == [38]
    assert change_points([10.0] * 39 + [5.0]) == []


def test_a_constant_series_and_a_short_one_have_none() -> None:
    assert change_points([0.0] * 30) == []
    assert change_points([1.0, 5.0, 1.0]) == []
    assert change_points([]) == []


def test_the_same_series_gives_the_same_answer() -> None:
    series = _noisy(30, seed=2)
    series[18:] *= 1.08
    (found,) = change_points(series)
    assert found.index == 18 and found.p_value <= 0.01
    assert found.relative_change == pytest.approx(0.08, abs=0.015)
    # The shuffles are seeded: the p-value itself, not only the index, is the same each time.
    assert change_points(series) == [found]
    # Another seed shuffles otherwise, and finds the same change.
    assert [c.index for c in change_points(series, seed=7)] == [18]


def test_a_series_with_a_gap_in_it_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        change_points([1.0, float("nan"), 2.0])


def test_the_p_value_is_the_share_of_shuffles_as_strong_counting_the_series_itself() -> None:
    # [0, 0, 1, 1] has one split with two values a side; a shuffle is as strong as the series
    # when its first two values are equal (then it is the series or its mirror). The paper's
    # p-value: (shuffles as strong + 1) / (shuffles + 1), from the same seeded generator.
    series = [0.0, 0.0, 1.0, 1.0]
    for seed, permutations in ((0, 199), (5, 30)):
        rng = np.random.default_rng(seed)
        as_strong = 0
        for _ in range(permutations):
            shuffled = rng.permutation(np.array(series))
            as_strong += int(shuffled[0] == shuffled[1])
        assert change_points(series, max_p=1.0, permutations=permutations, seed=seed) == [
            ChangePoint(2, (as_strong + 1) / (permutations + 1), 0.0, 1.0)
        ]
    assert change_points(series, max_p=1.0) == change_points(series, max_p=1.0, seed=0)


def test_a_split_that_tells_nothing_has_a_p_value_of_one() -> None:
    # A constant series: every split's statistic is 0, as strong as every shuffle's; p = 1,
    # which a level of 1 takes, and any level below refuses.
    assert change_points([3.0] * 4, max_p=1.0) == [ChangePoint(2, 1.0, 3.0, 3.0)]
    assert change_points([3.0] * 4, max_p=0.99) == []


def test_the_first_value_belongs_to_the_first_segment() -> None:
    # A drop after the first two runs of six: found at 2, the mean before it of both first runs.
    (found,) = change_points([10.0, 10.0, 1.0, 1.0, 1.0, 1.0], max_p=0.5, permutations=19)
    assert (found.index, found.mean_before, found.mean_after) == (2, 10.0, 1.0)


def test_a_series_with_a_gap_in_it_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^change points need a series of finite numbers$"):
        change_points([1.0, float("inf"), 2.0])
    with pytest.raises(ValueError, match=r"^change points need a series of finite numbers$"):
        change_points([[1.0, 2.0]])


def test_a_split_weaker_than_no_split_has_a_p_value_of_one() -> None:
    # [0, 1, 0, 1]: the one split has a negative statistic (between 2/4 x 2 = 1, less each
    # side's spread, 1 and 1): no evidence of a change, whatever the shuffles give.
    assert _best_split(np.array([0.0, 1.0, 0.0, 1.0])) == (-1.0, 2)
    assert change_points([0.0, 1.0, 0.0, 1.0], max_p=1.0) == [ChangePoint(2, 1.0, 0.5, 0.5)]

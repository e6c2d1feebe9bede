from __future__ import annotations

import pytest

from coordinator import FixedRateTest, Flow
from coordinator.definitions import DefinitionError, RepeatedTest, SearchTest, SweepTest
from coordinator.running.statistics import estimate


def test_confidence_interval_of_three_samples() -> None:
    # mean 12, s = 2, t(0.975, 2) = 4.303: half-width 4.303 * 2 / sqrt(3) = 4.9687.
    e = estimate([10.0, 12.0, 14.0])
    assert (e.n, e.mean, e.stdev) == (3, 12.0, 2.0)
    assert e.ci95 == pytest.approx((12 - 4.9687, 12 + 4.9687), abs=1e-3)
    assert estimate([5.0]).ci95 == (5.0, 5.0)
    # Many samples: the normal quantile.
    many = estimate([0.0, 2.0] * 50)
    assert many.ci95[1] - many.mean == pytest.approx(1.96 * many.stdev / 10)


def test_a_sweep_is_one_test_per_point_of_the_grid() -> None:
    base = FixedRateTest(send_url="kafka://h:9092/t-{test_id}?acks=all&linger_ms=1", rate=10)
    sweep = SweepTest(base, {"url.linger_ms": [0, 5], "url.partitions": [1, 4], "option.confirm_window": [10]})
    points = sweep.points()
    assert len(points) == 4 and points[1] == {"url.linger_ms": 0, "url.partitions": 4, "option.confirm_window": 10}
    test = sweep.at(points[1])
    # Replaced, added, the rest kept; the placeholder survives for the executor.
    assert test.send_url == "kafka://h:9092/t-{test_id}?acks=all&linger_ms=0&partitions=4"
    assert test.receive_url == test.send_url
    assert test.options == {"confirm_window": 10}
    assert sweep.at({"rate": 50}).rate == 50
    with pytest.raises(DefinitionError, match="sweep key 'colour'"):
        SweepTest(base, {"colour": ["red"]})
    with pytest.raises(DefinitionError, match="unknown option"):
        SweepTest(base, {"option.prefetsh": [1]})  # refused before any point runs
    flows = FixedRateTest(rate=1, flows=(Flow("amqp://h/a?prefetch=1"),))
    assert SweepTest(flows, {"url.prefetch": [5]}).at({"url.prefetch": 5}).flows[0].send_url == "amqp://h/a?prefetch=5"


def test_search_and_repeat_bounds() -> None:
    base = FixedRateTest(send_url="amqp://h/q")
    with pytest.raises(DefinitionError):
        SearchTest(base, low_rate=100, high_rate=50)
    with pytest.raises(DefinitionError):
        RepeatedTest(base, times=1)

from __future__ import annotations

import pytest

from reports.price import price_performance


def test_price_performance_from_an_hourly_price() -> None:
    # A 3-node cluster at 0.34 each per hour, receiving 50,000 msg/s.
    rows = {r["figure"]: r["value"] for r in price_performance(50_000, {"price_per_hour": "1.02", "currency": "USD"})}
    assert rows["price, USD/h"] == 1.02
    assert rows["throughput per price, msg/s per USD/h"] == pytest.approx(49_019.6, abs=0.1)
    # 1.02 * 730 h = 744.60 a month, for 50 lots of 1,000 msg/s.
    assert rows["cost per 1,000 msg/s per month, USD"] == pytest.approx(14.892)


@pytest.mark.parametrize("labels", [{}, {"price_per_hour": "free"}, {"price_per_hour": 0}, {"price_per_hour": -2}])
def test_no_figures_without_a_usable_price(labels: dict[str, object]) -> None:
    assert price_performance(50_000, labels) == []
    assert price_performance(0, {"price_per_hour": 1}) == []

"""Price-performance, when a test's labels carry the SUT's hourly price (`price_per_hour`, and
optionally `currency`): seed 000's throughput per cost and seed 002's cost per 1,000 msg/s per
month, both from the mean receive rate over whole seconds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reports.page import Row

__all__ = ["HOURS_PER_MONTH", "price_performance"]

HOURS_PER_MONTH = 730.0  # 8760 / 12: the month cloud price lists use


def price_performance(receive_rate_per_s: float, labels: Mapping[str, Any]) -> list[Row]:
    """Key-figure rows; none without a price, or with a price that is not a positive number."""
    try:
        price = float(labels.get("price_per_hour", ""))
    except (TypeError, ValueError):
        return []
    if price <= 0 or receive_rate_per_s <= 0:
        return []
    currency = str(labels.get("currency", "")).strip() or "money"
    return [
        {"figure": f"price, {currency}/h", "value": price},
        {"figure": f"throughput per price, msg/s per {currency}/h", "value": receive_rate_per_s / price},
        {
            "figure": f"cost per 1,000 msg/s per month, {currency}",
            "value": price * HOURS_PER_MONTH / (receive_rate_per_s / 1000),
        },
    ]

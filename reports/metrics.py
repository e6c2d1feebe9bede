"""`/metrics` in the Prometheus text format, made with prometheus_client from the running tests the
data server holds (reports/live.py): one series per test and per peer, labelled with the test's id
and name and the peer's name, role and host.

Counters are the peers' own since their run began, so they only grow while a test runs; when it
ends, the test's counts are the summary's (summary.json), exact. "Lost so far" is a gauge: it
counts gaps below the highest sequence number each receiver saw, and a late arrival fills one.
Times are in seconds, as Prometheus expects (the JSON's keys say µs, its people ms). Each
receiver's latency since its run began is a classic histogram (`maestro_peer_latency_seconds`,
buckets at protocol.hdr.BUCKET_BOUNDS_US), so `histogram_quantile(0.99, sum by (le)
(rate(maestro_peer_latency_seconds_bucket[1m])))` is the test's p99 across peers; the last
interval's own quantiles are gauges beside it. The workload is on `maestro_test_info`'s
labels; `maestro_test_outcome` says how a test ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.hdr import BUCKET_BOUNDS_US
from reports.live import LiveTest, LiveTests

__all__ = ["live_registry"]

_TEST = ["test_id", "test_name"]
_PEER = [*_TEST, "peer", "role", "host"]
_STATES = ("running", "finished", "silent")


def live_registry(tests: LiveTests) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_LiveCollector(tests))
    return registry


class _LiveCollector(Collector):
    def __init__(self, tests: LiveTests) -> None:
        self.tests = tests

    def collect(self) -> Iterator[Metric]:
        self.tests.forget_old()
        tests = list(self.tests.tests.values())
        yield from _test_metrics(tests)
        yield from _peer_metrics(tests)


def _test_labels(test: LiveTest) -> list[str]:
    return [str(test.update.get("test_id", "")), str(test.update.get("name", ""))]


def _test_metrics(tests: list[LiveTest]) -> Iterator[Metric]:
    state = GaugeMetricFamily("maestro_test_state", "1 for the state the test is in", labels=[*_TEST, "state"])
    elapsed = GaugeMetricFamily("maestro_test_elapsed_seconds", "time since the test started", labels=_TEST)
    expected = GaugeMetricFamily("maestro_test_expected_seconds", "how long the test should run", labels=_TEST)
    info = GaugeMetricFamily(
        "maestro_test_info", "1, with the test's kind and workload as labels", labels=[*_TEST, "kind", "workload"]
    )
    target = GaugeMetricFamily(
        "maestro_test_target_rate", "the rate the senders are to send at, msg/s in all (not unbounded)", labels=_TEST
    )
    outcome = GaugeMetricFamily(
        "maestro_test_outcome", "1 for the outcome of an ended test", labels=[*_TEST, "outcome"]
    )
    counts = {
        "sent": CounterMetricFamily("maestro_test_messages_sent", "messages the senders sent", labels=_TEST),
        "received": CounterMetricFamily(
            "maestro_test_messages_received", "messages the receivers took (the summary's, once ended)", labels=_TEST
        ),
        "duplicates": CounterMetricFamily("maestro_test_duplicate_messages", "messages received twice", labels=_TEST),
    }
    lost = GaugeMetricFamily(
        "maestro_test_lost_messages", "lost so far (gaps; the summary's exact count once ended)", labels=_TEST
    )
    for test in tests:
        labels = _test_labels(test)
        for name in _STATES:
            state.add_metric([*labels, name], 1.0 if test.state == name else 0.0)
        elapsed.add_metric(labels, float(test.update.get("elapsed_s") or 0.0))
        info.add_metric([*labels, str(test.update.get("kind", "")), str(test.update.get("workload", ""))], 1.0)
        if rate := _number(test.update.get("target_rate")):
            target.add_metric(labels, rate)
        if test.update.get("state") == "finished" and test.update.get("outcome"):
            outcome.add_metric([*labels, str(test.update["outcome"])], 1.0)
        if test.update.get("expected_s"):
            expected.add_metric(labels, float(test.update["expected_s"]))
        totals = _test_totals(test)
        for key, family in counts.items():
            family.add_metric(labels, totals[key])
        lost.add_metric(labels, totals["lost"])
    yield from (state, elapsed, expected, info, target, outcome, *counts.values(), lost)


def _test_totals(test: LiveTest) -> dict[str, float]:
    final = (test.update.get("summary") or {}) if test.update.get("state") == "finished" else {}
    peers = test.update.get("peers", [])
    live = {
        "sent": sum(_number(p.get("sent")) for p in peers if p.get("role") == "sender"),
        "received": sum(_number(p.get("received")) for p in peers if p.get("role") == "receiver"),
        "duplicates": sum(_number(p.get("duplicates")) for p in peers),
        "lost": sum(_number(p.get("missing")) for p in peers),
    }
    return {key: _number(final[key]) if key in final else value for key, value in live.items()}


def _peer_metrics(tests: list[LiveTest]) -> Iterator[Metric]:
    sent = CounterMetricFamily("maestro_peer_messages_sent", "messages this peer sent", labels=_PEER)
    received = CounterMetricFamily("maestro_peer_messages_received", "messages this peer received", labels=_PEER)
    errors = CounterMetricFamily("maestro_peer_errors", "send and receive errors by kind", labels=[*_PEER, "kind"])
    duplicates = CounterMetricFamily("maestro_peer_duplicate_messages", "messages received twice", labels=_PEER)
    lost = GaugeMetricFamily("maestro_peer_lost_messages", "gaps below the highest sequence seen", labels=_PEER)
    latency = GaugeMetricFamily(
        "maestro_peer_interval_latency_seconds",
        "latency over the last interval (corrected for coordinated omission)",
        labels=[*_PEER, "quantile"],
    )
    histogram = HistogramMetricFamily(
        "maestro_peer_latency_seconds",
        "latency since the run began (corrected for coordinated omission)",
        labels=_PEER,
    )
    lag = GaugeMetricFamily(
        "maestro_peer_schedule_lag_seconds",
        "how late sends left over the last interval",
        labels=[*_PEER, "quantile"],
    )
    cpu = GaugeMetricFamily("maestro_peer_cpu_percent", "the generator's CPU, % of one core", labels=_PEER)
    up = GaugeMetricFamily("maestro_peer_state", "1 for the state the peer is in", labels=[*_PEER, "state"])
    for test in tests:
        ended = test.update.get("state") == "finished"
        final_peers = (test.update.get("summary") or {}).get("peers", {}) if ended else {}
        for peer in test.update.get("peers", []):
            labels = [*_test_labels(test), *(str(peer.get(k, "")) for k in ("name", "role", "host"))]
            counts = peer | final_peers.get(str(peer.get("name")), {})
            if "sent" in counts:
                sent.add_metric(labels, _number(counts["sent"]))
            if "received" in counts:
                received.add_metric(labels, _number(counts["received"]))
            if "duplicates" in counts:
                duplicates.add_metric(labels, _number(counts["duplicates"]))
            if "missing" in counts:
                lost.add_metric(labels, _number(counts["missing"]))
            for kind, n in (peer.get("errors") or {}).items():
                errors.add_metric([*labels, str(kind)], _number(n))
            for quantile, key in (("0.5", "p50"), ("0.99", "p99"), ("1", "max")):
                if f"latency_{key}_us" in peer:
                    latency.add_metric([*labels, quantile], _number(peer[f"latency_{key}_us"]) / 1e6)
                if f"lag_{key}_us" in peer:
                    lag.add_metric([*labels, quantile], _number(peer[f"lag_{key}_us"]) / 1e6)
            if buckets := _buckets(peer):
                histogram.add_metric(labels, buckets, _number(peer.get("latency_sum_us")) / 1e6)
            if "cpu_percent" in peer:
                cpu.add_metric(labels, _number(peer["cpu_percent"]))
            up.add_metric([*labels, str(peer.get("state", "starting"))], 1.0)
    yield from (sent, received, errors, duplicates, lost, latency, histogram, lag, cpu, up)


def _buckets(peer: dict[str, Any]) -> list[tuple[str, float]]:
    """A receiver's cumulative counts at each bound, in seconds, and +Inf; none from a peer
    whose counts do not fit the bounds (a sender, or a worker of another version)."""
    counts = peer.get("latency_le_us")
    if not isinstance(counts, list) or len(counts) != len(BUCKET_BOUNDS_US):
        return []
    bounds = [f"{bound / 1e6:g}" for bound in BUCKET_BOUNDS_US]
    return [*zip(bounds, map(_number, counts), strict=True), ("+Inf", _number(peer.get("latency_count")))]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0

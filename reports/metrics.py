"""`/metrics` in the Prometheus text format, made with prometheus_client from the running tests the
data server holds (reports/live.py): one series per test and per peer, labelled with the test's id
and name and the peer's name, role and host.

Counters are the peers' own since their run began, so they only grow while a test runs; when it
ends, the test's counts are the summary's (summary.json), exact. "Lost so far" is a gauge: it
counts gaps below the highest sequence number each receiver saw, and a late arrival fills one.
Times are in seconds, as Prometheus expects (the JSON's keys say µs, its people ms). Each
receiver's latency since its run began is a classic histogram (`maestro_peer_latency_seconds`,
buckets at protocol.hdr.BUCKET_BOUNDS_US), so `histogram_quantile(0.99, sum by (le)
(rate(maestro_peer_latency_seconds_bucket[1m])))` is the test's p99 across peers, and a
requester's response time likewise (`maestro_peer_response_time_seconds`); the last interval's
own quantiles are gauges beside them. The workload is on `maestro_test_info`'s
labels, in a line and in parts; `maestro_test_outcome` says how a test ended; the bytes moved are
messages times their mean size; a peer's CPU is a ratio of one core.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.hdr import BUCKET_BOUNDS_US
from protocol.live import WORKLOAD_LABELS
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
    return [test.update.test_id, test.update.name]


def _test_metrics(tests: list[LiveTest]) -> Iterator[Metric]:
    state = GaugeMetricFamily("maestro_test_state", "1 for the state the test is in", labels=[*_TEST, "state"])
    elapsed = GaugeMetricFamily("maestro_test_elapsed_seconds", "time since the test started", labels=_TEST)
    expected = GaugeMetricFamily("maestro_test_expected_seconds", "how long the test should run", labels=_TEST)
    info = GaugeMetricFamily(
        "maestro_test_info",
        "1, with the test's kind and workload as labels: in a line, and in parts",
        labels=[*_TEST, "kind", "workload", *WORKLOAD_LABELS],
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
    volume = {
        "sent": CounterMetricFamily(
            "maestro_test_sent_bytes", "bytes the senders sent: messages x their mean size", labels=_TEST
        ),
        "received": CounterMetricFamily(
            "maestro_test_received_bytes", "bytes the receivers took: messages x their mean size", labels=_TEST
        ),
    }
    lost = GaugeMetricFamily(
        "maestro_test_lost_messages", "lost so far (gaps; the summary's exact count once ended)", labels=_TEST
    )
    for test in tests:
        u, labels = test.update, _test_labels(test)
        for name in _STATES:
            state.add_metric([*labels, name], 1.0 if test.state == name else 0.0)
        elapsed.add_metric(labels, u.elapsed_s)
        info.add_metric([*labels, u.kind, u.workload, *(u.workload_labels.get(k, "") for k in WORKLOAD_LABELS)], 1.0)
        if u.target_rate:
            target.add_metric(labels, u.target_rate)
        if u.state == "finished" and u.outcome:
            outcome.add_metric([*labels, u.outcome], 1.0)
        if u.expected_s:
            expected.add_metric(labels, u.expected_s)
        totals = _test_totals(test)
        for key, family in counts.items():
            family.add_metric(labels, totals[key])
        lost.add_metric(labels, totals["lost"])
        if u.size_bytes:  # the messages' mean size times their count: MB/s is its rate
            for key, family in volume.items():
                family.add_metric(labels, totals[key] * u.size_bytes)
    yield from (state, elapsed, expected, info, target, outcome, *counts.values(), lost, *volume.values())


def _test_totals(test: LiveTest) -> dict[str, float]:
    final = test.update.summary if test.update.state == "finished" else None
    live = {
        "sent": sum(_number(p.counters.sent) for p in test.update.peers if p.role == "sender"),
        "received": sum(_number(p.counters.received) for p in test.update.peers if p.role == "receiver"),
        "duplicates": sum(_number(p.counters.duplicates) for p in test.update.peers),
        "lost": sum(_number(p.counters.missing) for p in test.update.peers),
    }
    if final is None:
        return live
    exact = {"sent": final.sent, "received": final.received, "duplicates": final.duplicates, "lost": final.lost}
    return {key: value if (count := exact[key]) is None else float(count) for key, value in live.items()}


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
    response = GaugeMetricFamily(
        "maestro_peer_interval_response_time_seconds",
        "a requester's response time over the last interval (request/reply; from the intended send)",
        labels=[*_PEER, "quantile"],
    )
    responses = HistogramMetricFamily(
        "maestro_peer_response_time_seconds",
        "a requester's response time since the run began (request/reply; from the intended send)",
        labels=_PEER,
    )
    replies = CounterMetricFamily("maestro_peer_replies", "replies a requester had in time", labels=_PEER)
    timed_out = CounterMetricFamily("maestro_peer_requests_timed_out", "requests with no reply in time", labels=_PEER)
    cpu = GaugeMetricFamily(
        "maestro_peer_cpu_usage_ratio",
        "the generator's CPU over the last interval, in cores (1 = one core)",
        labels=_PEER,
    )
    up = GaugeMetricFamily("maestro_peer_state", "1 for the state the peer is in", labels=[*_PEER, "state"])
    for test in tests:
        summary = test.update.summary if test.update.state == "finished" else None
        final_peers = summary.peers if summary is not None else {}
        for peer in test.update.peers:
            labels = [*_test_labels(test), peer.name, peer.role, peer.host]
            c, final = peer.counters, final_peers.get(peer.name, {})
            if (count := final.get("sent", c.sent)) is not None:
                sent.add_metric(labels, count)
            if (count := final.get("received", c.received)) is not None:
                received.add_metric(labels, count)
            if c.duplicates is not None:
                duplicates.add_metric(labels, c.duplicates)
            if c.missing is not None:
                lost.add_metric(labels, c.missing)
            for kind, n in (c.errors or {}).items():
                errors.add_metric([*labels, kind], n)
            for quantile, key in (("0.5", "p50"), ("0.99", "p99"), ("1", "max")):
                if (value := getattr(c, f"latency_{key}_us")) is not None:
                    latency.add_metric([*labels, quantile], value / 1e6)
                if (value := getattr(c, f"lag_{key}_us")) is not None:
                    lag.add_metric([*labels, quantile], value / 1e6)
            for quantile, value in (("0.5", c.response_p50_us), ("0.99", c.response_p99_us)):
                if value is not None:
                    response.add_metric([*labels, quantile], value / 1e6)
            if (count := final.get("replies", c.replies)) is not None:
                replies.add_metric(labels, count)
            if (count := final.get("timed_out", c.timed_out)) is not None:
                timed_out.add_metric(labels, count)
            if buckets := _buckets(c.latency_le_us, c.latency_count):
                histogram.add_metric(labels, buckets, _number(c.latency_sum_us) / 1e6)
            if buckets := _buckets(c.response_le_us, c.response_count):
                responses.add_metric(labels, buckets, _number(c.response_sum_us) / 1e6)
            if c.cpu_percent is not None:
                cpu.add_metric(labels, c.cpu_percent / 100)
            up.add_metric([*labels, peer.state], 1.0)
    yield from (
        sent,
        received,
        errors,
        duplicates,
        lost,
        latency,
        histogram,
        lag,
        response,
        responses,
        replies,
        timed_out,
        cpu,
        up,
    )


def _buckets(counts: tuple[int, ...] | None, total: int | None) -> list[tuple[str, float]]:
    """A receiver's latency or a requester's response time: cumulative counts at each bound, in
    seconds, and +Inf; none from a peer whose counts do not fit the bounds (a sender, or a
    worker of another version)."""
    if counts is None or len(counts) != len(BUCKET_BOUNDS_US):
        return []
    bounds = [f"{bound / 1e6:g}" for bound in BUCKET_BOUNDS_US]
    return [*zip(bounds, map(float, counts), strict=True), ("+Inf", _number(total))]


def _number(value: float | None) -> float:
    return 0.0 if value is None else float(value)

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from protocol.live import LiveUpdate
from reports import live
from reports.live import LiveTests
from reports.metrics import live_registry


def _update(state: str = "running", **extra: Any) -> LiveUpdate:
    return LiveUpdate.from_json(_update_json(state, **extra))


def _update_json(state: str = "running", **extra: Any) -> dict[str, Any]:
    return {
        "test_id": "t1",
        "name": "nightly",
        "kind": "fixed-rate",
        "workload": "fixed-rate: 50 msg/s per client, 100 in all; 2 client(s) in each of 1 sender(s) and 1 receiver(s)",
        "workload_labels": {"rate_per_client": "50", "clients": "2", "message_size": "256 B", "length": "20s",
                            "destination": "amqp://h/q", "other": "dropped"},
        "target_rate": 100.0,
        "size_bytes": 256.0,
        "started_s": 1.0,
        "elapsed_s": 5.0,
        "expected_s": 20.0,
        "state": state,
        "peers": [
            {"name": "s1", "role": "sender", "host": "a", "state": "running", "sent": 500,
             "errors": {"refused": 2}, "lag_p50_us": 10, "lag_p99_us": 40, "lag_max_us": 90, "cpu_percent": 12.5},
            {"name": "r1", "role": "receiver", "host": "b", "state": "running", "received": 480, "duplicates": 1,
             "missing": 3, "latency_p50_us": 800, "latency_p99_us": 2000, "latency_max_us": 5000,
             "latency_le_us": [0, 0, 0, 100, 300, 470, 470, 480, *[480] * 11], "latency_count": 480,
             "latency_sum_us": 480_000},
        ],
        "points": [
            {"elapsed_s": 4.0, "send_rate": 100.0, "receive_rate": 96.0},
            {"elapsed_s": 5.0, "send_rate": 100.0, "receive_rate": 100.0},
        ],
    } | extra  # fmt: skip


def _samples(tests: LiveTests) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(live_registry(tests)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_a_running_test_in_the_prometheus_text_format() -> None:
    tests = LiveTests()
    asyncio.run(tests.post("t1", _update()))
    s = _samples(tests)
    peer = {"test_id": "t1", "test_name": "nightly", "peer": "s1", "role": "sender", "host": "a"}
    assert _value(s, "maestro_peer_messages_sent_total", **peer) == 500
    assert _value(s, "maestro_peer_errors_total", **peer, kind="refused") == 2
    assert _value(s, "maestro_peer_schedule_lag_seconds", **peer, quantile="0.99") == 40e-6
    assert _value(s, "maestro_peer_cpu_usage_ratio", **peer) == 0.125  # of one core
    receiver = peer | {"peer": "r1", "role": "receiver", "host": "b"}
    assert _value(s, "maestro_peer_messages_received_total", **receiver) == 480
    assert _value(s, "maestro_peer_interval_latency_seconds", **receiver, quantile="0.5") == 800e-6
    assert _value(s, "maestro_peer_interval_latency_seconds", **receiver, quantile="1") == 5000e-6
    # Since the run began, as a histogram in seconds: 480 samples, 100 at or below 500 µs, 470
    # at or below 2.5 ms, all of them at or below 10 ms; their sum 0.48 s.
    assert _value(s, "maestro_peer_latency_seconds_bucket", **receiver, le="5e-05") == 0
    assert _value(s, "maestro_peer_latency_seconds_bucket", **receiver, le="0.0005") == 100
    assert _value(s, "maestro_peer_latency_seconds_bucket", **receiver, le="0.0025") == 470
    assert _value(s, "maestro_peer_latency_seconds_bucket", **receiver, le="0.01") == 480
    assert _value(s, "maestro_peer_latency_seconds_bucket", **receiver, le="+Inf") == 480
    assert _value(s, "maestro_peer_latency_seconds_count", **receiver) == 480
    assert _value(s, "maestro_peer_latency_seconds_sum", **receiver) == 0.48
    assert not [n for n, ls in s if n.startswith("maestro_peer_latency_seconds") and ("peer", "s1") in ls]
    assert _value(s, "maestro_peer_lost_messages", **receiver) == 3
    assert _value(s, "maestro_test_messages_sent_total", test_id="t1") == 500
    assert _value(s, "maestro_test_lost_messages", test_id="t1") == 3
    assert _value(s, "maestro_test_state", test_id="t1", state="running") == 1
    assert _value(s, "maestro_test_state", test_id="t1", state="finished") == 0
    info = _value(s, "maestro_test_info", test_id="t1", kind="fixed-rate", workload=_update_json()["workload"])
    assert info == 1 and _value(s, "maestro_test_target_rate", test_id="t1") == 100
    # The workload in parts, to select and group by: a fixed set, the parts not sent empty.
    (labels,) = [dict(ls) for n, ls in s if n == "maestro_test_info"]
    assert (labels["rate_per_client"], labels["clients"], labels["message_size"]) == ("50", "2", "256 B")
    assert (labels["length"], labels["destination"], labels["senders"]) == ("20s", "amqp://h/q", "")
    assert "other" not in labels
    # Bytes as Prometheus counts them: 500 messages of 256 B sent, 480 received.
    assert _value(s, "maestro_test_sent_bytes_total", test_id="t1") == 500 * 256
    assert _value(s, "maestro_test_received_bytes_total", test_id="t1") == 480 * 256
    assert not [n for n, _ in s if n == "maestro_test_outcome"]  # running: no outcome yet
    assert _value(s, "maestro_test_expected_seconds", test_id="t1") == 20


def test_a_finished_test_counts_what_its_summary_counts() -> None:
    tests = LiveTests()
    asyncio.run(tests.post("t1", _update()))
    summary = {"sent": 1000, "received": 998, "lost": 2, "duplicates": 0, "peers": {"s1": {"sent": 1000},
               "r1": {"received": 998}}}  # fmt: skip
    asyncio.run(tests.post("t1", _update("finished", outcome="success", summary=summary, points=[])))
    s = _samples(tests)
    assert _value(s, "maestro_test_messages_sent_total", test_id="t1") == 1000
    assert _value(s, "maestro_test_messages_received_total", test_id="t1") == 998
    assert _value(s, "maestro_test_lost_messages", test_id="t1") == 2
    assert _value(s, "maestro_peer_messages_sent_total", peer="s1") == 1000
    assert _value(s, "maestro_test_state", test_id="t1", state="finished") == 1
    # The live page's view says the same counts (it kept the last report's 500 and 480).
    peers = {p["name"]: p for p in tests.tests["t1"].view()["peers"]}
    assert (peers["s1"]["sent"], peers["r1"]["received"], peers["r1"]["duplicates"]) == (1000, 998, 1)
    assert _value(s, "maestro_test_outcome", test_id="t1", outcome="success") == 1
    assert [n for n, labels in s if n == "maestro_test_outcome"] == ["maestro_test_outcome"]  # that one only
    assert [p.elapsed_s for p in tests.tests["t1"].points] == [4.0, 5.0]  # the last post had none


def test_a_test_that_stops_posting_turns_silent_and_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    tests = LiveTests()
    asyncio.run(tests.post("t1", _update()))
    assert tests.listing()[0].state == "running" and tests.listing()[0].progress == 0.25
    later = time.monotonic() + live.SILENT_AFTER_S + 1
    monkeypatch.setattr(live.time, "monotonic", lambda: later)
    assert tests.listing()[0].state == "silent"
    assert _value(_samples(tests), "maestro_test_state", test_id="t1", state="silent") == 1
    much_later = later + live.FORGET_AFTER_S
    monkeypatch.setattr(live.time, "monotonic", lambda: much_later)
    assert tests.listing() == []


def test_an_update_waits_for_its_watchers() -> None:
    async def scenario() -> tuple[int, int]:
        tests = LiveTests()
        await tests.post("t1", _update())
        waiting = asyncio.create_task(tests.wait_change("t1", 1, timeout_s=5))
        await asyncio.sleep(0.05)
        await tests.post("t1", _update(points=[{"elapsed_s": 6.0, "send_rate": 100.0, "receive_rate": 100.0}]))
        changed = await waiting
        timed_out = await tests.wait_change("t1", 2, timeout_s=0.05)
        assert changed is not None and timed_out is None
        return changed.version, len(changed.view(since=2)["points"])

    assert asyncio.run(scenario()) == (2, 1)


def test_the_grafana_dashboard_reads_only_what_metrics_exposes() -> None:
    dashboard = json.loads((Path(__file__).parents[3] / "grafana" / "maestro-dashboard.json").read_text())
    tests = LiveTests()
    asyncio.run(tests.post("t1", _update()))
    text = generate_latest(live_registry(tests)).decode()
    exposed = {s.name: set(s.labels) for f in text_string_to_metric_families(text) for s in f.samples}
    targets = [t for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(targets) >= 10
    for target in targets:
        names = set(re.findall(r"maestro_[a-z_]+", target["expr"]))
        assert names and names <= exposed.keys(), (target["expr"], names - exposed.keys())
        labels = set().union(*(exposed[n] for n in names))
        assert set(re.findall(r"{{(\w+)}}", target["legendFormat"])) <= labels, target
        assert set(re.findall(r"(\w+)=~?\"", target["expr"])) <= labels, target
    variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert all(re.search(r"label_values\(maestro_test_state\b", q) for q in variables)


def test_a_closed_system_shows_its_response_time_replies_and_timeouts() -> None:
    requester = {"name": "q1", "role": "sender", "host": "a", "state": "running", "sent": 210, "replies": 200,
                 "timed_out": 4, "errors": {}, "response_p50_us": 10_700, "response_p99_us": 52_000,
                 "response_le_us": [*[0] * 8, 150, 190, 200, *[200] * 8], "response_count": 200,
                 "response_sum_us": 3_000_000}  # fmt: skip
    replier = {"name": "p1", "role": "receiver", "host": "b", "state": "running", "received": 206}
    point = {"elapsed_s": 3.0, "send_rate": 70.0, "receive_rate": 69.0, "response_p50_us": 10_700.0,
             "response_p99_us": 52_000.0}  # fmt: skip
    tests = LiveTests()
    update = _update(kind="request-reply", peers=[requester, replier], points=[point])
    asyncio.run(tests.post("t1", update))
    s = _samples(tests)
    assert _value(s, "maestro_peer_interval_response_time_seconds", peer="q1", quantile="0.5") == 0.0107
    assert _value(s, "maestro_peer_interval_response_time_seconds", peer="q1", quantile="0.99") == 0.052
    assert _value(s, "maestro_peer_replies_total", peer="q1") == 200
    assert _value(s, "maestro_peer_requests_timed_out_total", peer="q1") == 4
    # #40: the response time since the run began, as a histogram in seconds, to sum across
    # requesters: 150 at or below 25 ms, 190 at or below 50 ms, all 200 at or below 100 ms.
    assert _value(s, "maestro_peer_response_time_seconds_bucket", peer="q1", le="0.01") == 0
    assert _value(s, "maestro_peer_response_time_seconds_bucket", peer="q1", le="0.025") == 150
    assert _value(s, "maestro_peer_response_time_seconds_bucket", peer="q1", le="0.05") == 190
    assert _value(s, "maestro_peer_response_time_seconds_bucket", peer="q1", le="+Inf") == 200
    assert _value(s, "maestro_peer_response_time_seconds_sum", peer="q1") == 3.0
    assert not [
        n for n, labels in s if n.startswith("maestro_peer_response_time_seconds") and dict(labels)["peer"] == "p1"
    ]
    assert not [n for n, labels in s if n == "maestro_peer_replies_total" and dict(labels)["peer"] == "p1"]
    (drawn,) = tests.tests["t1"].view()["points"]
    assert (drawn["response_p50_us"], drawn["response_p99_us"]) == (10_700.0, 52_000.0)
    # Ended, the requester's counters are the summary's, as sent and received are.
    final = {"sent": 230, "received": 230, "lost": 0, "duplicates": 0,
             "peers": {"q1": {"sent": 230, "replies": 226, "timed_out": 4}, "p1": {"received": 230}}}  # fmt: skip
    asyncio.run(tests.post("t1", _update("finished", kind="request-reply", peers=[requester, replier], summary=final)))
    s = _samples(tests)
    assert _value(s, "maestro_peer_replies_total", peer="q1") == 226
    assert _value(s, "maestro_peer_messages_sent_total", peer="q1") == 230


@pytest.mark.parametrize(
    ("cpu", "loop_ms", "bound"),
    [(89.9, 99.9, False), (90.0, 0.0, True), (10.0, 100.0, True), (None, 500.0, False)],
)
def test_a_sender_at_its_limit_is_named_as_it_happens(cpu: float | None, loop_ms: float, bound: bool) -> None:
    """The report's bounds (90 % of a core, the loop 100 ms late), on each second's figures; a
    sender that has not reported its CPU yet is not judged."""
    sender = {"name": "s1", "role": "sender", "host": "a", "state": "running", "sent": 5, "loop_lag_ms": loop_ms}
    if cpu is not None:
        sender["cpu_percent"] = cpu
    tests = LiveTests()
    asyncio.run(tests.post("t1", _update(peers=[sender])))
    found = tests.tests["t1"].view()["generator_bound"]
    if bound:
        assert found == [
            f"sender s1 at {cpu:.0f} % of a core (event loop {loop_ms:.0f} ms late) in its last second: the load "
            "generator, not the SUT, is the limit now"
        ]
    else:
        assert found == []

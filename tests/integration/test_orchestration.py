"""Tests run by the coordinator end to end: real daemons, RabbitMQ as the SUT, Mosquitto as the
control broker, a real data server process.

Known answers: a fixed-rate test schedules exactly rate x clients x seconds messages per
sender; all of them must be on the data server's books, received once each.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.processes import Daemons
from support.runs import run_with

from coordinator import Fail, FixedRateTest, Flow, IncrementalTest, Maestro
from coordinator.definitions import DefinitionError, RepeatedTest, SearchTest, SweepTest
from protocol.ratefile import read_rate_file

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]


def queue_url() -> str:
    return f"amqp://guest:guest@127.0.0.1:5672/maestro-orch-{uuid.uuid4().hex[:8]}"


def fetch_info(url: str, test_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/results/{test_id}") as response:
        info: dict[str, Any] = json.loads(response.read())
    return info


def start_workers(daemons: Daemons, senders: int, receivers: int) -> None:
    for n in range(1, receivers + 1):
        daemons.start("maestro-worker", f"r{n}", "--role", "receiver")
    for n in range(1, senders + 1):
        daemons.start("maestro-worker", f"s{n}", "--role", "sender")


def test_a_fixed_rate_script_with_two_senders_and_two_receivers(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    start_workers(daemons, senders=2, receivers=2)
    test = FixedRateTest(send_url=queue_url(), rate=50, size=512, parallel=2, duration="6s", senders=2, receivers=2)
    result = run_with(daemons, url, test, peers=4)
    assert result.passed, result.reason
    # 2 senders x 2 clients x 50 msg/s x 6 s, each received exactly once.
    s = result.summary.to_json()
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (1200, 1200, 0, 0)
    assert s["send_rate"]["mean"] == pytest.approx(200, rel=0.02)
    assert 0 < s["latency_us"]["p50"] <= s["latency_us"]["p99"] <= s["latency_us"]["max"]
    assert s["latency_samples"] == 1200

    info = fetch_info(url, result.test_id)
    record = info["test"]
    assert (
        record["outcome"] == "success"
        and record["reason"] == "all 1,200 messages arrived; sent 100% of the 200 msg/s asked"
    )
    assert record["summary"]["sent"] == record["summary"]["received"] == 1200
    assert {p["name"]: p["role"] for p in record["peers"]} == {
        "r1": "receiver",
        "r2": "receiver",
        "s1": "sender",
        "s2": "sender",
    }
    for peer in record["peers"]:
        # Measured directly (UDP): a loopback round trip, ± half of it and a µs of reading.
        for when in ("before", "after"):
            clock = peer["clock"][when]
            assert clock["path"] == "udp" and 0 < clock["rtt_us"] < 5000, clock
            assert clock["uncertainty_us"] == pytest.approx(clock["rtt_us"] / 2 + 1, abs=0.1)
        # And every 2 s while the 6 s of load ran: at least 4 samples in all.
        assert peer["clock"]["path"] == "udp" and len(peer["clock"]["samples"]) >= 4
    files = {f["path"] for f in info["files"]}
    for name in ("s1", "s2"):
        for file in ("peer.json", "sender-0000.csv.gz", "sender-seconds.json"):
            assert f"sender/{name}/{file}" in files
    for name in ("r1", "r2"):
        pieces = ("receiver-latency.hlog", "receiver-sequences.json", "receiver-0000.csv.gz", "receiver-seconds.json")
        for file in ("peer.json", *pieces):
            assert f"receiver/{name}/{file}" in files
    assert {"test.json", "junit.xml"} <= files
    # The data server holds them; each peer deleted its copy only after the server confirmed it.
    assert (root / result.test_id / "sender" / "s1" / "peer.json").is_file()
    for name in ("s1", "s2", "r1", "r2"):
        assert not [p for p in (daemons.log_dir / name).rglob("*") if p.is_file()], name
    junit = (root / result.test_id / "junit.xml").read_text()
    assert 'tests="1" failures="0"' in junit


def test_an_incremental_test_stops_at_the_first_failing_step(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    start_workers(daemons, senders=1, receivers=1)
    # One consumer that takes 10 ms per message with one message in flight: ~100 msg/s at most.
    # 40 msg/s passes; 200 msg/s builds a backlog whose latency passes 200 ms within seconds.
    base = FixedRateTest(
        send_url=queue_url() + "?prefetch=1",
        duration="5s",
        options={"processing_delay_ms": 10},
        fail=Fail(latency_ms=200, latency_percentile=99),
    )
    test = IncrementalTest(base=base, initial_rate=40, ceiling_rate=360, rate_step=160)
    assert test.steps() == [(40, 1), (200, 1), (360, 1)]
    result = run_with(daemons, url, test, peers=2)
    assert [s.outcome for s in result.steps] == ["success", "failure"]
    assert "latency p99" in (result.steps[1].reason or "") and "> bound 200 ms" in (result.steps[1].reason or "")
    assert result.passed and result.best is result.steps[0]
    best = result.record.max_sustainable
    assert best is not None and (best.rate_per_client, best.parallel) == (40, 1)
    assert best.receive_rate == pytest.approx(40, rel=0.05)
    assert isinstance(result.record.stopped_by, str) and result.record.stopped_by.startswith("step 2: r1@")
    info = fetch_info(url, result.test_id)
    assert [step["outcome"] for step in info["test"]["steps"]] == ["success", "failure"]
    assert fetch_info(url, result.steps[1].test_id)["test"]["outcome"] == "failure"


def test_a_receiver_killed_mid_test_fails_it_within_5_s_and_the_rest_is_collected(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    start_workers(daemons, senders=1, receivers=2)
    test = FixedRateTest(send_url=queue_url(), rate=50, duration="30s", receivers=2)
    killed_at: list[float] = []

    def kill_r1() -> None:
        time.sleep(4)
        killed_at.append(time.time())
        os.kill(daemons.procs["r1"].pid, signal.SIGKILL)

    with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=0, data_server=url) as maestro:
        maestro.wait_for_peers(3, timeout_s=20)
        killer = threading.Thread(target=kill_r1)
        killer.start()
        started = time.monotonic()
        result = maestro.run(test, progress=False)
        killer.join()
    assert not result.passed
    assert result.reason is not None and "peer lost: r1@" in result.reason
    assert result.reason.endswith("(last will, then no answer to a PING)"), result.reason
    assert isinstance(result.record.failed_at, str)
    failed_at = datetime.fromisoformat(result.record.failed_at).timestamp()
    assert 0 <= failed_at - killed_at[0] < 5
    assert time.monotonic() - started < 25  # it did not run its 30 s
    files = {f["path"] for f in fetch_info(url, result.test_id)["files"]}
    assert "sender/s1/peer.json" in files and "receiver/r2/peer.json" in files
    assert not any(f.startswith("receiver/r1/") for f in files)
    assert [why for who, why in (result.record.collection or {}).items() if who.startswith("r1@")] == [
        "lost: its files stay on its host, if any"
    ]


def test_role_less_workers_are_given_the_roles_a_test_needs(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    for name in ("w1", "w2"):
        daemons.start("maestro-worker", name)
    result = run_with(daemons, url, FixedRateTest(send_url=queue_url(), rate=20, duration="3s"), peers=2)
    assert result.passed, result.reason
    assert sorted(p.role for p in result.record.peers or ()) == ["receiver", "sender"]
    assert result.summary.sent == result.summary.received == 60


def slow_consumer_test(duration: str = "4s") -> FixedRateTest:
    """One consumer taking 10 ms per message, one in flight: ~100 msg/s at most."""
    return FixedRateTest(
        send_url=queue_url() + "-{test_id}?prefetch=1",
        duration=duration,
        options={"processing_delay_ms": 10},
        fail=Fail(latency_ms=200),
    )


def test_a_search_bisects_the_rate_and_keeps_the_curve(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    start_workers(daemons, senders=1, receivers=1)
    test = SearchTest(slow_consumer_test(), low_rate=20, high_rate=400, resolution=0.3, max_steps=5)
    result = run_with(daemons, url, test, peers=2)
    assert result.passed, result.reason
    steps = result.record.steps or ()
    rates = [step.rate_per_client for step in steps]
    # The consumer takes ~100 msg/s. 20 passes, 400 fails; then the midpoints: 210 and 115 fail
    # (at 115/s the backlog grows ~15 messages a second, 150 ms of latency a second: past the
    # 200 ms bound within the 4 s), 67.5 passes, and the 5 steps are spent.
    assert rates == [20, 400, 210, 115, 67.5]
    outcomes = [s.outcome for s in steps]
    assert outcomes == ["success", "failure", "failure", "failure", "success"]
    best = result.record.max_sustainable
    assert best is not None and best.rate_per_client == 67.5
    curve = result.record.curve or ()
    assert [row.target_rate for row in curve] == sorted(r or 0.0 for r in rates)
    # Each phase used a queue of its own ({test_id} in the URL): nothing carried over.
    assert all(step.lost == 0 for step in steps)


def test_repetitions_give_a_mean_and_a_confidence_interval(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    start_workers(daemons, senders=1, receivers=1)
    base = FixedRateTest(send_url=queue_url() + "-{test_id}", rate=25, parallel=2, duration="3s")
    with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=0, data_server=url) as maestro:
        maestro.wait_for_peers(2, timeout_s=20)
        repeated = maestro.run(RepeatedTest(base, times=2), progress=False)
        sweep = maestro.run(SweepTest(base, {"rate": [10, 40]}), progress=False)
    assert repeated.passed, repeated.reason
    statistics, steps = repeated.record.statistics or {}, repeated.record.steps or ()
    stats = statistics["receive_rate"]
    assert stats.n == 2 and stats.mean == pytest.approx(50, rel=0.05)
    # mean ± t(0.975, 1) s / √2 over the two runs' own rates, computed here.
    runs = [step.receive_rate or 0.0 for step in steps]
    mean = sum(runs) / 2
    half = 12.706 * math.sqrt(sum((x - mean) ** 2 for x in runs)) / math.sqrt(2)
    assert stats.mean == pytest.approx(mean)
    assert stats.ci95 == (pytest.approx(max(0.0, mean - half)), pytest.approx(mean + half))
    # The receive rates are a schedule's, often equal (an interval of no width, whatever t is):
    # the latency figures have spread, and the same rule, t and not z, must give their intervals.
    for figure, key in (("latency_p50_us", "p50"), ("latency_max_us", "max")):
        values = [getattr(step.latency_us, key) for step in steps]
        assert values[0] != values[1], (figure, values)  # a spread for t to act on
        mean = sum(values) / 2
        half = 12.706 * math.sqrt(sum((x - mean) ** 2 for x in values)) / math.sqrt(2)
        estimate = statistics[figure]
        # Two runs' t is 12.7: the interval often reaches below 0, where it ends (no latency is).
        expected = (pytest.approx(max(0.0, mean - half)), pytest.approx(mean + half))
        assert estimate.ci95 == expected, (figure, values)
    assert sweep.passed, sweep.reason
    rows = sweep.record.comparison or ()
    assert [row.point for row in rows] == [{"rate": 10}, {"rate": 40}]
    assert [row.receive_rate for row in rows] == [pytest.approx(20, rel=0.05), pytest.approx(80, rel=0.05)]
    assert sweep.record.best is not None and sweep.record.best.test_id == rows[1].test_id


def test_a_profile_changes_rate_and_clients_during_one_test(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    start_workers(daemons, senders=1, receivers=1)
    # 2 s at 20/s on one client, 2 s at 50/s on two, 2 s at 10/s on one: 40 + 200 + 20 messages.
    test = FixedRateTest(send_url=queue_url(), duration="6s", profile=((0, 20, 1), ("2s", 50, 2), ("4s", 10, 1)))
    result = run_with(daemons, url, test, peers=2)
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 260
    sender = root / result.test_id / "sender" / "s1"
    info = json.loads((sender / "peer.json").read_text())
    etas = sorted(eta for name in info["files"] if name.endswith(".csv.gz") for eta, _ in read_rate_file(sender / name))
    per_second = Counter((eta - etas[0]) // 1_000_000 for eta in etas)
    assert [per_second[s] for s in range(6)] == [20, 20, 100, 100, 10, 10]


def test_a_test_that_cannot_run_fails_with_its_reason_and_no_traceback(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    start_workers(daemons, senders=1, receivers=1)
    with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=0, data_server=url) as maestro:
        maestro.wait_for_peers(2, timeout_s=20)
        # A misspelt driver option is refused in the definition, before any daemon tries it.
        with pytest.raises(DefinitionError, match="unknown option 'prefetsh'"):
            FixedRateTest(send_url=queue_url() + "?prefetsh=5", duration="2s")
        # An unreachable SUT: the receiver cannot start consuming within its reconnect budget.
        unreachable = maestro.run(
            FixedRateTest(send_url="amqp://127.0.0.1:1/q", duration="2s", options={"reconnect_budget_s": 1}),
            progress=False,
        )
    assert not unreachable.passed and "127.0.0.1:1" in (unreachable.reason or "")


def test_two_queues_fed_by_different_numbers_of_senders(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    """Seed 004 §7.4, scaled: queue A fed by two senders, queue B by one, a receiver each."""
    url, _ = data_server
    start_workers(daemons, senders=3, receivers=2)
    a, b = queue_url() + "-a", queue_url() + "-b"
    test = FixedRateTest(rate=20, duration="3s", flows=(Flow(a, senders=2), Flow(b, senders=1)))
    result = run_with(daemons, url, test, peers=5)
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 3 * 20 * 3
    # Each receiver got exactly its own queue's share: 2 senders' worth and 1 sender's worth.
    received = sorted(p.received for p in result.summary.peers if p.role == "receiver")
    assert received == [60, 120]

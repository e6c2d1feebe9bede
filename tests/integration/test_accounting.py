"""The three counts against a real broker that drops messages it acknowledged: a RabbitMQ queue
bounded by `x-max-length` with `x-overflow: drop-head` confirms every publish and drops the
oldest once full, so a receiver slower than the sender gets fewer than the broker accepted.
RabbitMQ's own queue counters, read after the run, give the same number independently."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.processes import Daemons
from support.rabbit_queues import delete_queue
from support.runs import run_with

from coordinator import FixedRateTest
from coordinator.outcome.results import TestResult

pytestmark = [pytest.mark.rabbitmq, pytest.mark.mosquitto]

MANAGEMENT = "http://guest:guest@127.0.0.1:15672"
_COUNT = 600


def _queue_counters(queue: str) -> dict[str, Any]:
    """The queue as RabbitMQ's management API tells it, once its statistics stopped changing
    over a refresh (every 5 s by default; publishes and deliveries are refreshed apart)."""
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()
    request = urllib.request.Request(f"http://127.0.0.1:15672/api/queues/%2F/{queue}", headers={"Authorization": auth})

    def counts() -> tuple[dict[str, Any], tuple[int, ...]]:
        with urllib.request.urlopen(request, timeout=5) as response:
            info: dict[str, Any] = json.loads(response.read())
        stats = info.get("message_stats", {})
        return info, (stats.get("publish", 0), stats.get("deliver_get", 0), stats.get("redeliver", 0), info["messages"])

    # 30 s was not enough once in a full suite (-n 3 on 2 cores): the queue's publishes stood at
    # 352 of 600 when the test read them; alone it read 600 in four runs of four.
    deadline = time.monotonic() + 60
    info, before = counts()
    while True:
        time.sleep(5.5)
        info, now = counts()
        if (now == before and now[0] >= _COUNT) or time.monotonic() > deadline:
            return info
        before = now


def _run(
    daemons: Daemons, server: str, queue: str, arguments: str, sent_to: str | None = None
) -> tuple[TestResult, dict[str, Any]]:
    """The test's result, and RabbitMQ's own counters of its queue after it (`sent_to`, where the
    URL's queue is numbered per client)."""
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-inspector", "i1")
    # 300 msg/s offered for 2 s against a consumer of ~100 msg/s (10 ms a message, one at a time).
    test = FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/{queue}?prefetch=1{arguments}",
        rate=300,
        count=_COUNT,
        options={"processing_delay_ms": 10, "inspector_interval_s": 1},
        inspectors=(f"rabbitmq={MANAGEMENT}",),
    )
    try:
        result = run_with(daemons, server, test, peers=3)
        return result, _queue_counters(sent_to or queue)
    finally:
        delete_queue(sent_to or queue)


def test_a_full_drop_head_queue_drops_what_it_confirmed_and_is_named(
    daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    server, _ = data_server
    queue = f"maestro-drop-{uuid.uuid4().hex[:8]}"
    result, rabbit = _run(daemons, server, queue, "&max_length=10&overflow=drop-head")
    counts = result.summary.accounting.to_json()
    # Every publish confirmed, fewer delivered: the difference is what the broker dropped, and
    # RabbitMQ's own counters say the same, independently of ours.
    assert (counts["intended"], counts["sent"], counts["accepted"]) == (_COUNT, _COUNT, _COUNT)
    received = counts["received"]
    dropped = _COUNT - received
    stats = rabbit["message_stats"]
    assert stats["publish"] == _COUNT and rabbit["messages"] == 0
    assert stats["deliver_get"] - stats.get("redeliver", 0) == received
    assert 200 < dropped < _COUNT - 10, counts  # the consumer kept up with about a third
    assert result.outcome == "failure"
    [row] = counts["per_sender"]
    assert result.reason == (
        f"sender {row['sender']}: the SUT (amqp://guest:***@127.0.0.1:5672/{queue}?prefetch=1&max_length=10"
        f"&overflow=drop-head) accepted {_COUNT:,} messages and delivered {received:,}: it dropped {dropped:,} it "
        "had acknowledged" + result.reason.partition("it had acknowledged")[2]
    )
    # The inspector's last reading of the queue, as far as RabbitMQ's statistics had come then
    # (refreshed every 5 s): cited only where it had caught up with ours, and then exact.
    [sut] = counts["sut_counters"]
    assert sut["queue"] == queue and sut["published"] <= _COUNT
    assert sut["caught_up"] == (sut["published"] == _COUNT and sut["delivered"] >= received)
    assert ("its own counters agree" in result.reason) == sut["caught_up"]
    if sut["caught_up"]:
        assert sut["dropped"] == dropped and sut["delivered"] == received
    assert result.summary.lost == dropped


def test_a_numbered_queue_that_drops_is_named_by_its_own_counters(
    daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    """`%d` with `destinations=5-6`: the one client sends to ...-5, and RabbitMQ's counters of
    that queue are the SUT's witness (before, the pattern matched no queue: no witness at all)."""
    server, _ = data_server
    queue = f"maestro-drop-{uuid.uuid4().hex[:8]}"
    result, rabbit = _run(
        daemons, server, f"{queue}-%d", "&destinations=5-6&max_length=10&overflow=drop-head", sent_to=f"{queue}-5"
    )
    counts = result.summary.accounting.to_json()
    [row] = counts["per_sender"]
    assert row["queue"] == f"{queue}-5" and row["accepted"] == _COUNT
    assert rabbit["message_stats"]["publish"] == _COUNT and row["received"] < _COUNT - 200
    assert result.outcome == "failure" and "it dropped" in (result.reason or "")
    [sut] = counts["sut_counters"]
    assert sut["queue"] == f"{queue}-5" and sut["published"] <= _COUNT  # as far as RabbitMQ had refreshed
    if sut["caught_up"]:
        assert sut["dropped"] == _COUNT - row["received"]


def test_the_same_run_without_the_bound_has_three_equal_counts(daemons: Daemons, data_server: tuple[str, Path]) -> None:
    server, _ = data_server
    queue = f"maestro-nodrop-{uuid.uuid4().hex[:8]}"
    result, rabbit = _run(daemons, server, queue, "")
    counts = result.summary.accounting.to_json()
    assert result.passed, result.reason
    assert (counts["intended"], counts["sent"], counts["accepted"], counts["received"]) == (_COUNT,) * 4
    assert rabbit["message_stats"]["publish"] == _COUNT
    [sut] = counts["sut_counters"]
    assert sut["queue"] == queue and sut["published"] <= _COUNT
    assert sut["dropped"] == 0 or not sut["caught_up"], sut  # only a reading from before shows drops

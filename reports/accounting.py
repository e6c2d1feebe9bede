"""The three counts of a test, sender by sender: what the schedule meant to send (`intended`),
what the SUT acknowledged (`accepted`: null where the driver's settings acknowledge nothing)
and what the receivers got (`received`, distinct sequence numbers), with `sent` (handed to the
client library) between the first two; and beside them the SUT's own counters where an
inspector read them (RabbitMQ's queues, Kafka's topics). summary.json holds them as
`accounting`; the coordinator judges them (coordinator.outcome.results.accounting_verdict).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from protocol.figures import Accounting, AccountingRow, SenderFigures
from protocol.results import PeerRecord
from protocol.sut_url import Endpoint, SutUrlError, parse_sut_url

__all__ = ["accounting", "sut_counters", "sut_of"]

_COUNTS = ("intended", "sent", "accepted", "received")


def sut_of(peer: PeerRecord, client: int) -> str | None:
    """The SUT URL client `client` of a sender sent to (passwords redacted), as its options
    give them (round robin over several)."""
    urls = peer.options.get("send_url")
    if isinstance(urls, str):
        urls = [urls]
    return str(urls[client % len(urls)]) if urls else None


def accounting(per_sender: Iterable[SenderFigures], sut: list[dict[str, Any]]) -> Accounting:
    """The three counts per sender (the loss table's rows: `expected` is what it sent) and in
    total. A total is null where one sender's count is: a sum of some is no figure."""
    rows = [
        AccountingRow(
            sender=row.sender,
            sut=row.sut,
            queue=None if (queue := _queue_of(row.sut)) is None else queue[1],
            topic=_topic_of(row.sut),
            # At most once: nothing acknowledged, so nothing promised; the SUT may drop.
            guarantee="at-most-once" if row.accepted is None else "at-least-once",
            intended=row.intended,
            sent=row.expected,
            accepted=row.accepted,
            received=row.received,
        )
        for row in per_sender
    ]
    as_json = [row.to_json() for row in rows]
    return Accounting(
        **{name: _total(getattr(row, name) for row in rows) for name in _COUNTS},
        per_sender=tuple(rows),
        sut_counters=tuple(_caught_up(c, as_json) for c in sut),
    )


def _caught_up(counters: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A queue's or topic's counters, and whether they had caught up with ours when read.

    A queue's counted every message our senders sent to it and every one our receivers got from
    it: RabbitMQ refreshes publishes and deliveries apart, so a reading from before may show the
    publishes and no deliveries, and drops that never happened. A topic's took at least what it
    acknowledged to our senders (what they sent, where nothing was acknowledged): a first reading
    from after the senders began, or a broker that numbers batches rather than records (tansu),
    shows fewer. Such a reading is shown, never cited."""
    if counters["source"] == "kafka":
        ours = [row for row in rows if row["topic"] == counters["topic"]]
        took = sum(row["sent"] if row["accepted"] is None else row["accepted"] for row in ours)
        return counters | {"caught_up": counters["took"] >= took}
    ours = [row for row in rows if row["queue"] == counters["queue"]]
    caught_up = counters["published"] >= sum(row["sent"] for row in ours) and counters["delivered"] >= sum(
        row["received"] for row in ours
    )
    return counters | {"caught_up": caught_up}


def _total(counts: Iterable[int | None]) -> int | None:
    total = 0
    for count in counts:
        if count is None:
            return None
        total += count
    return total


def _endpoint(url: str | None) -> Endpoint | None:
    if url is None:
        return None
    try:
        return parse_sut_url(url)
    except SutUrlError:
        return None


def destination_of(url: str | None) -> str | None:
    """The queue, topic, stream or subject a SUT URL names (`%d` where it is numbered per
    client), for the report to tell the test's own from the rest of the broker."""
    endpoint = _endpoint(url)
    return endpoint.destination if endpoint is not None and endpoint.destination else None


def _queue_of(url: str | None) -> tuple[str, str] | None:
    """(vhost, queue) of an AMQP 0-9-1 SUT that a sender publishes to the queue of (no
    exchange of its own): the queue whose counters are the SUT's for that sender."""
    endpoint = _endpoint(url)
    if endpoint is None or endpoint.scheme not in ("amqp", "amqps") or endpoint.options.get("exchange"):
        return None
    return str(endpoint.options.get("vhost", "/")), endpoint.destination


def _topic_of(url: str | None) -> str | None:
    """The Kafka topic a sender produces to: the topic whose offsets are the SUT's count for it."""
    endpoint = _endpoint(url)
    return endpoint.destination if endpoint is not None and endpoint.scheme in ("kafka", "kafkas") else None


def sut_counters(test_dir: Path, suts: Iterable[str | None]) -> list[dict[str, Any]]:
    """The SUT's own counts of where the senders sent: RabbitMQ's queues, then Kafka's topics."""
    urls = list(suts)
    return _rabbitmq_counters(test_dir, urls) + _kafka_counters(test_dir, urls)


def _rabbitmq_counters(test_dir: Path, suts: Iterable[str | None]) -> list[dict[str, Any]]:
    """The last figures a RabbitMQ inspector read of each queue the senders sent to: what the
    queue took (`published`), handed out for the first time (`delivered`) and still held
    (`left`), and what it therefore dropped without delivering (`dropped`: a full queue's
    drop-head, an expired message). RabbitMQ refreshes these every 5 s by default, so they are
    as of `at`, not of the test's end."""
    wanted = {where for url in suts if (where := _queue_of(url)) is not None}
    last: dict[tuple[str, str], dict[str, str]] = {}
    for path in sorted(test_dir.glob("inspector/*/rabbitmq-queues.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                where = (row.get("vhost", ""), row.get("queue", ""))
                if where in wanted and row.get("published"):  # older files lack the totals
                    last[where] = row
    found = []
    for (vhost, name), row in sorted(last.items()):
        published, left = int(row["published"]), int(row["messages"])
        delivered = int(row["delivered"]) - int(row["redelivered"])
        found.append(
            {
                "source": "rabbitmq",
                "vhost": vhost,
                "queue": name,
                "at": row["timestamp"],
                "published": published,
                "delivered": delivered,
                "left": left,
                "dropped": max(0, published - delivered - left),
            }
        )
    return found


def _kafka_counters(test_dir: Path, suts: Iterable[str | None]) -> list[dict[str, Any]]:
    """Each topic the senders sent to as a Kafka inspector read its watermarks (its
    `kafka-partitions.csv`), from its first reading (before the senders start) to its last:
    what the topic took meanwhile (`took`: the high watermark's advance), of that what it still
    holds (`kept`) and what it deleted (`deleted`: its low watermark moved past them, by
    retention or a DeleteRecords), in total and per partition. The broker does not know what
    was read, so `deleted` counts read and unread alike."""
    wanted = {topic for url in suts if (topic := _topic_of(url)) is not None}
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(test_dir.glob("inspector/*/kafka-partitions.csv")):
        with path.open(newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("high")]
        # The first reading's rows are stamped one by one as they are written, a few ms apart at
        # most; the next reading comes an interval (1 s at least) later and lists each partition
        # again, a new one perhaps before the others (they come by name).
        first: set[tuple[str, int]] = set()
        in_first = True
        before: dict[tuple[str, int], int] = {}
        last: dict[tuple[str, int], dict[str, str]] = {}
        for row in rows:
            key = (row["topic"], int(row["partition"]))
            in_first = in_first and key not in first and _apart_s(rows[0], row) < _READING_S
            if in_first:
                first.add(key)
            if row["topic"] in wanted:
                # A partition missing from the first reading was made during the test: from offset 0.
                before.setdefault(key, int(row["high"]) if in_first else 0)
                last[key] = row
        for topic in sorted({topic for topic, _ in last}):
            keys = sorted(key for key in last if key[0] == topic)
            partitions = [_partition_counts(key[1], before[key], last[key]) for key in keys]
            found[topic] = {
                "source": "kafka",
                "topic": topic,
                "from": rows[0]["timestamp"],
                "at": max(last[key]["timestamp"] for key in keys),
                "partitions": len(partitions),
                **{name: sum(p[name] for p in partitions) for name in ("took", "kept", "deleted")},
                "per_partition": partitions,
            }
    return [found[topic] for topic in sorted(found)]


_READING_S = 0.5  # under the inspector's least interval (inspector.main.MIN_INTERVAL_S)


def _apart_s(first: dict[str, str], row: dict[str, str]) -> float:
    return (datetime.fromisoformat(row["timestamp"]) - datetime.fromisoformat(first["timestamp"])).total_seconds()


def _partition_counts(partition: int, high_before: int, row: dict[str, str]) -> dict[str, int]:
    """One partition's share: the test's messages are the offsets from `high_before` to its
    high watermark; those under its low watermark are gone."""
    low, high = int(row["low"]), int(row["high"])
    start = high_before if high >= high_before else 0  # a partition made anew numbers from 0 again
    return {
        "partition": partition,
        "high_before": start,
        "low": low,
        "high": high,
        "took": high - start,
        "kept": high - max(low, start),
        "deleted": max(0, low - start),
    }

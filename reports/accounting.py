"""The three counts of a test, sender by sender: what the schedule meant to send (`intended`),
what the SUT acknowledged (`accepted`: null where the driver's settings acknowledge nothing)
and what the receivers got (`received`, distinct sequence numbers), with `sent` (handed to the
client library) between the first two; and beside them the SUT's own counters where an
inspector read them (RabbitMQ's queues, Kafka's topics, a Qpid Dispatch Router's addresses).
summary.json holds them as `accounting`; the coordinator judges them
(coordinator.outcome.results.accounting_verdict).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from protocol.figures import (
    Accounting,
    AccountingRow,
    AddressCounters,
    PartitionCounts,
    QueueCounters,
    SenderFigures,
    SutCounters,
    TopicCounters,
)
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


def client_of(sender: str) -> int:
    """The client number in a loss-table row's sender, `peer/client` (reports.summary)."""
    number = sender.rpartition("/")[2]
    return int(number) if number.isdigit() else 0


def accounting(per_sender: Iterable[SenderFigures], sut: list[SutCounters]) -> Accounting:
    """The three counts per sender (the loss table's rows: `expected` is what it sent) and in
    total. A total is null where one sender's count is: a sum of some is no figure."""
    rows = [
        AccountingRow(
            sender=row.sender,
            sut=row.sut,
            queue=None if (queue := _queue_of(row.sut, client_of(row.sender))) is None else queue[1],
            topic=_topic_of(row.sut, client_of(row.sender)),
            # At most once: nothing acknowledged, so nothing promised; the SUT may drop.
            guarantee="at-most-once" if row.accepted is None else "at-least-once",
            intended=row.intended,
            sent=row.expected,
            accepted=row.accepted,
            received=row.received,
        )
        for row in per_sender
    ]
    return Accounting(
        **{name: _total(getattr(row, name) for row in rows) for name in _COUNTS},
        per_sender=tuple(rows),
        sut_counters=tuple(replace(c, caught_up=_caught_up(c, rows)) for c in sut),
    )


def _took(row: AccountingRow) -> int:
    """What the SUT took of a sender's at least: what it acknowledged, or where it acknowledged
    nothing, what was sent."""
    return row.sent if row.accepted is None else row.accepted


def _caught_up(counters: SutCounters, rows: list[AccountingRow]) -> bool:
    """A queue's or topic's counters, and whether they had caught up with ours when read.

    A queue's counted every message our senders sent to it and every one our receivers got from
    it: RabbitMQ refreshes publishes and deliveries apart, so a reading from before may show the
    publishes and no deliveries, and drops that never happened. A topic's took at least what it
    acknowledged to our senders (what they sent, where nothing was acknowledged): a first reading
    from after the senders began, or a broker that numbers batches rather than records (tansu),
    shows fewer. Such a reading is shown, never cited."""
    if isinstance(counters, AddressCounters):
        # A router took at least what it acknowledged, and its consumer links carried at least
        # what our receivers got; a reading from before they had (its links vanish as they detach,
        # up to an interval after their last reading) is shown, never cited.
        ours = [row for row in rows if _address_of(row.sut, client_of(row.sender)) == counters.address]
        return counters.took >= sum(map(_took, ours)) and counters.delivered >= sum(row.received for row in ours)
    if isinstance(counters, TopicCounters):
        return counters.took >= sum(_took(row) for row in rows if row.topic == counters.topic)
    ours = [row for row in rows if row.queue == counters.queue]
    return counters.published >= sum(row.sent for row in ours) and counters.delivered >= sum(
        row.received for row in ours
    )


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


# Where a sender's client sent: its SUT URL and its client number, which picks the destination
# where the URL numbers them (`orders-%d` with `destinations=1-8`: client 2 sent to orders-3).
Client = tuple[str | None, int]


def _queue_of(url: str | None, client: int = 0) -> tuple[str, str] | None:
    """(vhost, queue) of an AMQP 0-9-1 SUT that a sender publishes to the queue of (no
    exchange of its own): the queue whose counters are the SUT's for that sender."""
    endpoint = _endpoint(url)
    if endpoint is None or endpoint.scheme not in ("amqp", "amqps") or endpoint.options.get("exchange"):
        return None
    return str(endpoint.options.get("vhost", "/")), endpoint.destination_for(client)


def _topic_of(url: str | None, client: int = 0) -> str | None:
    """The Kafka topic a sender produces to: the topic whose offsets are the SUT's count for it."""
    endpoint = _endpoint(url)
    return endpoint.destination_for(client) if endpoint is not None and endpoint.scheme in ("kafka", "kafkas") else None


def _address_of(url: str | None, client: int = 0) -> str | None:
    """The address an AMQP 1.0 sender sends to: the address whose counters a router keeps for it."""
    endpoint = _endpoint(url)
    if endpoint is None or endpoint.scheme not in ("amqp10", "amqp10s"):
        return None
    return endpoint.destination_for(client)


def sut_counters(test_dir: Path, clients: Iterable[Client]) -> list[SutCounters]:
    """The SUT's own counts of where the senders' clients sent: RabbitMQ's queues, then Kafka's
    topics, then a router's addresses."""
    sent = list(clients)
    return _rabbitmq_counters(test_dir, sent) + _kafka_counters(test_dir, sent) + _router_counters(test_dir, sent)


def _rabbitmq_counters(test_dir: Path, suts: Iterable[Client]) -> list[SutCounters]:
    """Each queue the senders sent to as a RabbitMQ inspector read it, from its first reading
    (before the senders start) to its last: what the queue took meanwhile (`published`), handed
    out for the first time (`delivered`), held at the end (`left`, `left_before` at the start),
    and what it therefore dropped without delivering (`dropped`: a full queue's drop-head, an
    expired message). A queue's counters are its whole life's: a queue an earlier run used had
    twice the test's counts cited as its drops (a hostile pass), so the first reading is taken
    off, as a queue made during the test (or made again: its counts went down) counts from 0.
    RabbitMQ refreshes these every 5 s by default, so they are as of `at`, not of the test's end."""
    wanted = {where for url, client in suts if (where := _queue_of(url, client)) is not None}
    spans: dict[tuple[str, str], tuple[dict[str, str] | None, dict[str, str]]] = {}
    for path in sorted(test_dir.glob("inspector/*/rabbitmq-queues.csv")):
        with path.open(newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("published")]  # older files lack the totals
        first = {
            (row.get("vhost", ""), row.get("queue", "")): row for row in rows if _apart_s(rows[0], row) < _READING_S
        }
        for row in rows:
            where = (row.get("vhost", ""), row.get("queue", ""))
            if where in wanted:
                spans[where] = (first.get(where), row)
    found: list[SutCounters] = []
    for (vhost, name), (before, row) in sorted(spans.items()):
        start = _queue_counts(before)
        end = _queue_counts(row)
        if end[0] < start[0]:  # made again during the test: its counts began anew
            start = (0, 0, 0)
        published, delivered = end[0] - start[0], end[1] - start[1]
        left, left_before = end[2], start[2]
        found.append(
            QueueCounters(
                vhost=vhost,
                queue=name,
                since=before["timestamp"] if before else None,
                at=row["timestamp"],
                published=published,
                delivered=delivered,
                left_before=left_before,
                left=left,
                dropped=max(0, published - delivered - (left - left_before)),
            )
        )
    return found


def _queue_counts(row: dict[str, str] | None) -> tuple[int, int, int]:
    """(published, delivered for the first time, held) of a queue's reading; 0s for none."""
    if row is None:
        return 0, 0, 0
    return int(row["published"]), int(row["delivered"]) - int(row["redelivered"]), int(row["messages"])


def _kafka_counters(test_dir: Path, suts: Iterable[Client]) -> list[SutCounters]:
    """Each topic the senders sent to as a Kafka inspector read its watermarks (its
    `kafka-partitions.csv`), from its first reading (before the senders start) to its last:
    what the topic took meanwhile (`took`: the high watermark's advance), of that what it still
    holds (`kept`) and what it deleted (`deleted`: its low watermark moved past them, by
    retention or a DeleteRecords), in total and per partition. The broker does not know what
    was read, so `deleted` counts read and unread alike."""
    wanted = {topic for url, client in suts if (topic := _topic_of(url, client)) is not None}
    found: dict[str, SutCounters] = {}
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
            found[topic] = TopicCounters(
                topic=topic,
                since=rows[0]["timestamp"],
                at=max(last[key]["timestamp"] for key in keys),
                partitions=len(partitions),
                took=sum(p.took for p in partitions),
                kept=sum(p.kept for p in partitions),
                deleted=sum(p.deleted for p in partitions),
                per_partition=tuple(partitions),
            )
    return [found[topic] for topic in sorted(found)]


_READING_S = 0.5  # under the inspector's least interval (inspector.main.MIN_INTERVAL_S)


def _apart_s(first: dict[str, str], row: dict[str, str]) -> float:
    return (datetime.fromisoformat(row["timestamp"]) - datetime.fromisoformat(first["timestamp"])).total_seconds()


def _partition_counts(partition: int, high_before: int, row: dict[str, str]) -> PartitionCounts:
    """One partition's share: the test's messages are the offsets from `high_before` to its
    high watermark; those under its low watermark are gone."""
    low, high = int(row["low"]), int(row["high"])
    start = high_before if high >= high_before else 0  # a partition made anew numbers from 0 again
    return PartitionCounts(
        partition=partition,
        high_before=start,
        low=low,
        high=high,
        took=high - start,
        kept=high - max(low, start),
        deleted=max(0, low - start),
    )


# A router names a mobile address with its class and phase first: "M0orders" for `orders`, where
# senders and receivers attach (a waypoint would add phase 1, to and from its broker).
_MOBILE = "M0"


def _router_counters(test_dir: Path, suts: Iterable[Client]) -> list[SutCounters]:
    """Each address the AMQP 1.0 senders sent to, as amqp-management inspectors read a Qpid
    Dispatch Router's endpoint links (`amqp-management-links.csv`) and addresses: what the router
    took on its in-links (`took`), and what it answered the senders (`accepted`, `released`,
    `modified`, `rejected`; `unsettled` when last read); what it delivered on its out-links, and
    of that what the consumers accepted (`consumers_accepted`); and what it acknowledged beyond
    that (`dropped`). Several inspectors' readings add up, each of its own router.

    A link's counters start at its attach and vanish with it, so each link counts from the test's
    first reading (where it was there already) or from 0, to its last reading. A sender's link
    detaches as soon as its last message is settled, up to an interval after it was last read (a
    5 s run at 200 msg/s: 993 of 1,000 on Qpid Dispatch Router 1.19.0), while the address, which
    the receivers keep, had counted all 1,000: `took` is the larger of the two counts, the later
    reading. A delivery the router settled itself for a consumer that asked for them presettled
    counts as that consumer's acceptance (so its source reads: router_node.c, 1.19.0)."""
    wanted = {address for url, client in suts if (address := _address_of(url, client)) is not None}
    if not wanted:
        return []
    found: dict[str, AddressCounters] = {}
    for path in sorted(test_dir.glob("inspector/*/amqp-management-links.csv")):
        links = _csv_rows(path)
        addresses = _csv_rows(path.with_name("amqp-management-addresses.csv"))
        for address in sorted(wanted):
            counts = _router_address(address, links, addresses)
            if counts is None:
                continue
            seen = found.get(address)
            found[address] = counts if seen is None else seen.plus(counts)
    return [found[address] for address in sorted(found)]


_Rows = list[dict[str, str]]


def _csv_rows(path: Path) -> _Rows:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _router_address(address: str, links: _Rows, addresses: _Rows) -> AddressCounters | None:
    """One address's counts in one router's readings (see _router_counters), or None where no
    endpoint link of it was read."""
    name = _MOBILE + address
    before = {row["identity"]: row for row in links[: _first_reading(links, "identity")]}
    last: dict[str, dict[str, str]] = {}
    for row in links:
        if row.get("address") == name and row.get("link_type") == "endpoint":
            last[row["identity"]] = row
    if not last:
        return None

    def moved(column: str, direction: str) -> int:
        rows = [row for row in last.values() if row["link_dir"] == direction]
        return sum(int(row[column]) - int(before.get(row["identity"], {}).get(column) or 0) for row in rows)

    ingress, at = _ingress(name, addresses)
    accepted, consumers_accepted = moved("accepted_count", "in"), moved("accepted_count", "out")
    return AddressCounters(
        address=address,
        since=links[0]["timestamp"],
        at=max([row["timestamp"] for row in last.values()] + [at]),
        links_in=sum(row["link_dir"] == "in" for row in last.values()),
        links_out=sum(row["link_dir"] == "out" for row in last.values()),
        took=max(moved("delivery_count", "in"), ingress),
        delivered=moved("delivery_count", "out"),
        accepted=accepted,
        released=moved("released_count", "in"),
        modified=moved("modified_count", "in"),
        rejected=moved("rejected_count", "in"),
        unsettled=sum(int(row["unsettled_count"]) for row in last.values() if row["link_dir"] == "in"),
        consumers_accepted=consumers_accepted,
        dropped=max(0, accepted - consumers_accepted),
    )


def _ingress(name: str, rows: _Rows) -> tuple[int, str]:
    """How many deliveries the router's address `name` took in the readings, and when it was
    last read. The router deletes an address with its last link and makes it anew from 0: a
    count that went down began again."""
    in_first = _first_reading(rows, "name")
    total, start, previous, at = 0, 0, None, ""
    for i, row in enumerate(rows):
        if row.get("name") != name:
            continue
        count = int(row["deliveries_ingress"])
        if previous is None:
            start = count if i < in_first else 0  # there before the test: its earlier deliveries are not ours
        elif count < previous:
            total, start = total + previous - start, 0
        previous, at = count, row["timestamp"]
    return (0 if previous is None else total + previous - start), at


def _first_reading(rows: _Rows, key: str) -> int:
    """How many rows the inspector's first reading wrote: those stamped together (a few ms
    apart at most) before one entity comes again."""
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if row[key] in seen or _apart_s(rows[0], row) >= _READING_S:
            return i
        seen.add(row[key])
    return len(rows)

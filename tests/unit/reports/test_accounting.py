"""The three counts of a test folder, and the SUT's own, against answers worked out by hand."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

from support.router_runs import RUNS, run_accounting, senders
from support.synthetic import KEY, edit_peer_json, one_loss_one_duplicate

from protocol.figures import AccountingRow, SenderFigures, sut_counters_from_json
from reports.accounting import accounting, sut_counters
from reports.report import _sut_counters_section
from reports.summary import summarize

_URL = "amqp://guest:***@127.0.0.1:5672/q1"


def _sent_to(url: str, intended: int | None, accepted: int | None) -> Any:
    def edit(info: dict[str, Any]) -> None:
        info["options"] = {"send_url": [url]}
        info["senders"][f"{KEY:016x}"] |= {"intended": intended, "accepted": accepted}

    return edit


def _queue_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["timestamp", "vhost", "queue", "messages", "published", "delivered", "redelivered"])
        writer.writeheader()
        writer.writerows(rows)


def _partition_rows(path: Path, rows: list[tuple[str, str, int, int, int]]) -> None:
    """kafka-partitions.csv as the Kafka inspector writes it: (timestamp, topic, partition, low, high)."""
    path.parent.mkdir(parents=True)
    columns = ["timestamp", "topic", "partition", "leader", "replicas", "in_sync", "low", "high", "messages"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for at, topic, partition, low, high in rows:
            writer.writerow(dict(zip(columns, (at, topic, partition, 1, 1, 1, low, high, high - low), strict=True)))


def test_a_folders_three_counts_in_total_and_per_sender(tmp_path: Path) -> None:
    # 40 sent of 42 intended (stopped two slots short), 38 confirmed; 39 distinct received.
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_URL, 42, 38))
    counts = summarize(test).accounting
    assert (counts.intended, counts.sent, counts.accepted, counts.received) == (42, 40, 38, 39)
    assert counts.per_sender == (
        AccountingRow(
            sender="s1/0",
            sut=_URL,
            queue="q1",
            topic=None,
            guarantee="at-least-once",
            intended=42,
            sent=40,
            accepted=38,
            received=39,
        ),
    )
    assert counts.sut_counters == ()


def test_a_file_without_the_counts_gives_none_not_a_made_up_figure(tmp_path: Path) -> None:
    counts = summarize(one_loss_one_duplicate(tmp_path)).accounting
    assert (counts.intended, counts.sent, counts.accepted, counts.received) == (None, 40, None, 39)
    assert counts.per_sender[0].guarantee == "at-most-once"


def test_a_total_is_none_where_one_sender_has_none() -> None:
    rows = [
        {"sender": "a/0", "expected": 10, "intended": 10, "accepted": 10, "received": 10},
        {"sender": "b/0", "expected": 5, "intended": 6, "accepted": None, "received": 4},
    ]
    counts = accounting([SenderFigures.from_json(row) for row in rows], [])
    assert (counts.intended, counts.sent, counts.accepted, counts.received) == (16, 15, None, 14)
    assert [r.guarantee for r in counts.per_sender] == ["at-least-once", "at-most-once"]


def test_the_rabbitmq_queues_last_counters_show_what_it_dropped(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_URL, 40, 40))
    row = {"vhost": "/", "redelivered": 0}
    _queue_rows(
        test / "inspector" / "i1" / "rabbitmq-queues.csv",
        [
            # The first reading, before the senders: an earlier run left q1 with 20 published,
            # 2 delivered and 5 held (and 13 dropped then, which are not this test's).
            row | {"timestamp": _T0, "queue": "q1", "messages": 5, "published": 20, "delivered": 2},
            row | {"timestamp": _T0_1MS, "queue": "q2", "messages": 0, "published": 3, "delivered": 3},
            # The last: 40 more in, 30 more handed out of which 3 again (27 for the first time), 1
            # held: 40 - 27 - (1 - 5) = 17 dropped in the test (the earlier run's 5 held among them).
            row | {"timestamp": _T2, "queue": "q1", "messages": 1, "published": 60, "delivered": 32, "redelivered": 3},
            row | {"timestamp": _T2, "queue": "q2", "messages": 0, "published": 9, "delivered": 0},  # not ours
        ],
    )
    assert tuple(c.to_json() for c in summarize(test).accounting.sut_counters) == (
        {
            "source": "rabbitmq",
            "vhost": "/",
            "queue": "q1",
            "from": _T0,
            "at": _T2,
            "published": 40,
            "delivered": 27,
            "left_before": 5,
            "left": 1,
            "dropped": 17,
            "caught_up": False,  # 27 delivered, 39 received: read before RabbitMQ counted them all
        },
    )


def test_a_queue_made_during_the_test_or_made_again_counts_from_0(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_URL, 40, 40))
    row = {"vhost": "/", "queue": "q1", "redelivered": 0}
    _queue_rows(
        test / "inspector" / "i1" / "rabbitmq-queues.csv",
        [
            row | {"timestamp": _T0, "queue": "other", "messages": 0, "published": 1, "delivered": 1},
            # q1 was there, long-lived, then deleted and made again: its counts went down.
            row | {"timestamp": _T0_1MS, "messages": 0, "published": 5000, "delivered": 5000},
            row | {"timestamp": _T2, "messages": 0, "published": 40, "delivered": 39},
        ],
    )
    [counters] = summarize(test).accounting.sut_counters
    assert (counters.published, counters.delivered, counters.dropped, counters.caught_up) == (
        40,
        39,
        1,
        True,
    )
    # Not in the first reading at all: made by the test, from 0.
    (test / "inspector" / "i1" / "rabbitmq-queues.csv").unlink()
    (test / "inspector" / "i1").rmdir()
    _queue_rows(
        test / "inspector" / "i1" / "rabbitmq-queues.csv",
        [
            row | {"timestamp": _T0, "queue": "other", "messages": 0, "published": 1, "delivered": 1},
            row | {"timestamp": _T2, "messages": 2, "published": 40, "delivered": 38},
        ],
    )
    [counters] = summarize(test).accounting.sut_counters
    assert (counters.since, counters.published, counters.left_before, counters.dropped) == (None, 40, 0, 0)


def test_a_numbered_destination_is_each_clients_own_queue(tmp_path: Path) -> None:
    """`orders-%d` with `destinations=3-8`: client 0 sent to orders-3, whose counters are the
    SUT's for it; orders-4 was no client's here. Before, the pattern matched no queue at all."""
    url = "amqp://guest:***@127.0.0.1:5672/orders-%d?destinations=3-8"
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(url, 40, 40))
    row = {"timestamp": _T2, "vhost": "/", "messages": 0, "delivered": 39, "redelivered": 0}
    _queue_rows(
        test / "inspector" / "i1" / "rabbitmq-queues.csv",
        [
            row | {"timestamp": _T0, "queue": "other", "published": 0, "delivered": 0},  # the first reading
            row | {"queue": "orders-3", "published": 40},
            row | {"queue": "orders-4", "published": 7},
        ],
    )
    counts = summarize(test).accounting
    assert [(r.sender, r.queue) for r in counts.per_sender] == [("s1/0", "orders-3")]
    assert [(c.queue, c.published, c.dropped, c.caught_up) for c in counts.sut_counters] == [("orders-3", 40, 1, True)]


_KAFKA = "kafka://127.0.0.1:9092/t1?acks=all"
# Readings a second apart, as the inspector stamps them.
_T0, _T0_1MS, _T1, _T2 = (f"2027-01-15T08:00:0{s}Z" for s in ("0.000", "0.001", "1.000", "2.000"))


def test_a_kafka_topics_watermarks_give_what_it_took_kept_and_deleted_in_the_test(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_KAFKA, 40, 40))
    _partition_rows(
        test / "inspector" / "i1" / "kafka-partitions.csv",
        [
            # Before the senders: partition 0 holds 100..130 from earlier runs, partition 1 is empty.
            (_T0, "t1", 0, 100, 130),
            (_T0_1MS, "t1", 1, 7, 7),  # still the first reading: its rows' stamps may differ
            (_T0_1MS, "other", 0, 0, 50),
            (_T1, "t1", 0, 100, 140),
            (_T1, "t1", 1, 7, 12),
            # The last reading counts. Partition 0 took 25 (130..155); its low watermark passed the
            # 30 older ones and 8 of the test's: 8 deleted, 17 kept. Partition 1 took 15 (7..22)
            # and its low watermark passed 3 of them: 3 deleted, 12 kept.
            (_T2, "t1", 0, 138, 155),
            (_T2, "t1", 1, 10, 22),
            (_T2, "other", 0, 40, 90),
            # A partition first seen after the first reading was made during the test: from 0.
            (_T2, "t1", 2, 0, 4),
        ],
    )
    [counters] = summarize(test).accounting.sut_counters
    assert counters.to_json() == {
        "source": "kafka",
        "topic": "t1",
        "from": _T0,
        "at": _T2,
        "partitions": 3,
        "took": 25 + 15 + 4,
        "kept": 17 + 12 + 4,
        "deleted": 8 + 3,
        "per_partition": [
            {"partition": 0, "high_before": 130, "low": 138, "high": 155, "took": 25, "kept": 17, "deleted": 8},
            {"partition": 1, "high_before": 7, "low": 10, "high": 22, "took": 15, "kept": 12, "deleted": 3},
            {"partition": 2, "high_before": 0, "low": 0, "high": 4, "took": 4, "kept": 4, "deleted": 0},
        ],
        "caught_up": True,  # took 44 >= the 40 the topic acknowledged to our sender
    }
    assert summarize(test).accounting.per_sender[0].topic == "t1"


def test_a_kafka_topic_that_took_fewer_than_it_acknowledged_has_not_caught_up(tmp_path: Path) -> None:
    # A first reading from after the senders began (or a broker that numbers batches, not
    # records) shows fewer than the topic acknowledged: shown, never cited.
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_KAFKA, 40, 40))
    _partition_rows(test / "inspector" / "i1" / "kafka-partitions.csv", [(_T0, "t1", 0, 0, 5), (_T1, "t1", 0, 0, 44)])
    [counters] = summarize(test).accounting.sut_counters
    assert (counters.took, counters.kept, counters.deleted, counters.caught_up) == (39, 39, 0, False)


def test_a_topic_made_after_the_first_reading_counts_from_offset_0_though_it_comes_first_in_the_next(
    tmp_path: Path,
) -> None:
    # The senders made t1 once the inspector had read only u; the next reading lists t1 first.
    test = one_loss_one_duplicate(tmp_path)
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(_KAFKA, 40, 40))
    rows = [(_T0, "u", 0, 0, 9), (_T1, "t1", 0, 0, 25), (_T1, "u", 0, 0, 9), (_T2, "t1", 0, 0, 40), (_T2, "u", 0, 0, 9)]
    _partition_rows(test / "inspector" / "i1" / "kafka-partitions.csv", rows)
    [counters] = summarize(test).accounting.sut_counters
    assert (counters.took, counters.kept, counters.deleted, counters.caught_up) == (40, 40, 0, True)


def test_the_loss_tables_sut_counters_show_each_kind_with_its_own_columns() -> None:
    queue = {"source": "rabbitmq", "vhost": "/", "queue": "q1", "from": "T0", "at": "T2", "published": 40}
    queue |= {"delivered": 27, "left_before": 5, "left": 1, "dropped": 17, "caught_up": False}
    topic = {"source": "kafka", "topic": "t1", "from": "T0", "at": "T2", "partitions": 3, "took": 44, "kept": 33}
    topic |= {"deleted": 11, "per_partition": [], "caught_up": True}
    page = _sut_counters_section([sut_counters_from_json(queue), sut_counters_from_json(topic)])
    assert page.startswith("<h3>The SUT's own counters</h3>")
    queue_row = (
        "<tr><td>rabbitmq</td><td>q1</td><td>T0</td><td>T2</td><td>40</td><td>27</td><td>5</td><td>1</td><td>17</td>"
        "<td>False</td></tr>"
    )
    topic_row = "<tr><td>kafka</td><td>t1</td><td>3</td><td>T0</td><td>T2</td><td>44</td><td>33</td><td>11</td>"
    topic_row += "<td>True</td></tr>"
    assert queue_row in page and topic_row in page
    assert "<th>took</th><th>kept</th><th>deleted</th>" in page and page.index(queue_row) < page.index(topic_row)
    assert _sut_counters_section([]) == ""


# Qpid Dispatch Router 1.19.0, in real runs of the tool through it (tests/support/qdrouter_runs/README.md).
def _router(address: str, read: tuple[str, str], **counts: Any) -> dict[str, Any]:
    """A router's counters of `address`, read from the first to the last of `read`."""
    first, last = read
    fixed = {"links_in": 1, "rejected": 0, "dropped": 0, "caught_up": False}  # one sender, nothing rejected or dropped
    return {"source": "router", "address": address, "from": first, "at": last} | fixed | counts


def test_a_routers_address_in_a_clean_run_took_and_delivered_every_message() -> None:
    [sender] = senders("clean")
    assert [c.to_json() for c in sut_counters(RUNS / "clean", [(sender.sut, 0)])] == [
        _router(
            "maestro.clean1",
            ("2026-11-28T08:34:06.999Z", "2026-11-28T08:34:14.884Z"),
            links_out=1,
            # The address counted all 1,000. The sender's link was read last with 993 of them,
            # 992 accepted and 1 awaiting its outcome, 31 ms before it detached with all 1,000
            # accepted (the router's log): the answers to the senders lag by up to an interval.
            took=1000,
            accepted=992,
            released=0,
            modified=0,
            unsettled=1,
            delivered=1000,
            consumers_accepted=1000,
        )
    ]
    [counters] = run_accounting("clean").sut_counters
    assert counters.caught_up  # took 1,000 >= 1,000 accepted, delivered 1,000 >= 1,000 received


def test_without_the_address_the_senders_vanished_link_leaves_the_router_behind(tmp_path: Path) -> None:
    # The links alone: the sender's link detached before its last 7 were read, so the router's
    # reading had not caught up with what it acknowledged, and is shown, never cited.
    shutil.copytree(RUNS / "clean", tmp_path / "clean")
    (tmp_path / "clean" / "inspector" / "i1" / "amqp-management-addresses.csv").unlink()
    [counters] = run_accounting("clean", tmp_path / "clean").sut_counters
    assert (counters.took, counters.delivered, counters.caught_up) == (993, 1000, False)


def test_a_consumer_that_left_holding_deliveries_shows_as_released_and_modified() -> None:
    # A second consumer took 50 and left without settling them, with 75 more queued for it: the
    # router gave them back to the sender (modified, released), which had 875 accepted; the
    # receiver got 875.
    [counters] = run_accounting("consumer-left").sut_counters
    assert counters.to_json() == _router(
        "maestro.release",
        ("2026-11-28T08:39:27.625Z", "2026-11-28T08:39:39.526Z"),
        links_out=2,
        took=1000,
        # Read 0.6 s before the sender's link detached with 875 accepted, 75 released, 50 modified.
        accepted=807,
        released=75,
        modified=50,
        unsettled=68,
        delivered=925,  # 875 to the receiver, 50 to the consumer that left
        consumers_accepted=875,
        caught_up=True,
    )


def test_a_second_consumer_on_the_address_shows_as_a_second_link_that_accepted_them() -> None:
    [counters] = run_accounting("second-consumer").sut_counters
    assert counters.to_json() == _router(
        "maestro.thief",
        ("2026-11-28T08:37:22.839Z", "2026-11-28T08:37:30.507Z"),
        links_out=2,
        took=1000,
        accepted=995,
        released=0,
        modified=0,
        unsettled=5,  # queued for the second consumer, which gave no more credit
        delivered=995,
        consumers_accepted=995,  # 886 by the receiver, 109 by the second consumer
        caught_up=True,
    )


_LINK_COLUMNS = ["timestamp", "name", "link_dir", "link_type", "address", "oper_status", "identity"]
_LINK_COLUMNS += ["delivery_count", "undelivered_count", "presettled_count", "unsettled_count", "released_count"]
_LINK_COLUMNS += ["modified_count", "accepted_count", "rejected_count", "capacity"]


def _router_files(
    folder: Path, links: list[tuple[str, str, str, str, str, int, int]], ingress: list[tuple[str, int]]
) -> None:
    """The inspector's links (timestamp, identity, direction, type, address, delivered,
    accepted) and its address M0a's deliveries_ingress readings (timestamp, count)."""
    folder.mkdir(parents=True)
    with (folder / "amqp-management-links.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, _LINK_COLUMNS, restval=0)
        writer.writeheader()
        for at, identity, direction, kind, address, delivered, accepted in links:
            writer.writerow(
                {"timestamp": at, "name": f"link-{identity}", "link_dir": direction, "link_type": kind}
                | {"address": address, "oper_status": "up", "identity": identity, "capacity": 250}
                | {"delivery_count": delivered, "accepted_count": accepted}
            )
    with (folder / "amqp-management-addresses.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["timestamp", "name", "deliveries_ingress", "deliveries_egress"])
        writer.writeheader()
        writer.writerows(
            {"timestamp": at, "name": "M0a", "deliveries_ingress": n, "deliveries_egress": n} for at, n in ingress
        )


def test_a_router_counts_each_link_from_the_tests_first_reading_and_each_address_life_on(tmp_path: Path) -> None:
    url = "amqp10://router:5672/a"
    _router_files(
        tmp_path / "inspector" / "i1",
        [
            # The first reading: a sender link there before the test with 500 already, an
            # inter-router link and another address's link, which are not the test's.
            (_T0, "1", "in", "endpoint", "M0a", 500, 500),
            (_T0, "2", "in", "inter-router", "M0a", 70, 70),
            (_T0, "3", "out", "endpoint", "M0b", 9, 9),
            (_T1, "1", "in", "endpoint", "M0a", 520, 520),
            (_T1, "4", "out", "endpoint", "M0a", 20, 20),  # attached in the test: from 0
            (_T2, "1", "in", "endpoint", "M0a", 530, 529),
            (_T2, "4", "out", "endpoint", "M0a", 30, 29),
        ],
        # The address had 600 before the test, then was deleted and made anew: 10 + 12.
        [(_T0, 600), (_T1, 610), (_T2, 12)],
    )
    [counters] = sut_counters(tmp_path, [(url, 0), ("amqp://rabbit/q", 0)])
    assert (counters.address, counters.took, counters.accepted, counters.delivered) == ("a", 30, 29, 30)
    assert (counters.links_in, counters.links_out, counters.consumers_accepted) == (1, 1, 29)
    assert (counters.since, counters.at) == (_T0, _T2)
    # A second inspector, on a second router the address spans: its counts add up.
    _router_files(
        tmp_path / "inspector" / "i2",
        [(_T0, "9", "out", "endpoint", "M0a", 0, 0), (_T2, "9", "out", "endpoint", "M0a", 5, 5)],
        [],
    )
    [both] = sut_counters(tmp_path, [(url, 0)])
    assert (both.took, both.delivered, both.links_out, both.consumers_accepted) == (30, 35, 2, 34)
    assert sut_counters(tmp_path, [("amqp10://router:5672/elsewhere", 0)]) == []


def test_a_folders_summary_carries_the_routers_counters(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    [sender] = senders("second-consumer")
    edit_peer_json(test / "sender" / "s1" / "peer.json", _sent_to(str(sender.sut), 40, 40))
    shutil.copytree(RUNS / "second-consumer" / "inspector", test / "inspector")
    [counters] = summarize(test).accounting.sut_counters
    assert (counters.to_json()["source"], counters.address, counters.took, counters.caught_up) == (
        "router",
        "maestro.thief",
        1000,
        True,
    )


def test_the_loss_tables_sut_counters_show_a_routers_address_with_its_columns() -> None:
    page = _sut_counters_section(run_accounting("consumer-left").sut_counters)
    assert "<th>took</th><th>accepted</th><th>released</th><th>modified</th><th>unsettled</th>" in page
    row = "<td>router</td><td>maestro.release</td><td>2026-11-28T08:39:39.526Z</td><td>1,000</td><td>807</td>"
    assert row + "<td>75</td><td>50</td><td>68</td><td>925</td><td>2</td><td>875</td><td>0</td><td>True</td>" in page

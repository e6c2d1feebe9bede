"""The three counts against the delivery guarantee, with counts worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.router_runs import cut_before, run_accounting

from coordinator import Fail, FixedRateTest
from coordinator.outcome.results import accounting_verdict, judge
from protocol.figures import Accounting, TestFigures

_SUT = "amqp://guest:***@127.0.0.1:5672/q"


def _row(sender: str, sent: int, accepted: int | None, received: int, **more: Any) -> dict[str, Any]:
    counts = {"intended": sent, "sent": sent, "accepted": accepted, "received": received}
    return {"sender": sender, "sut": _SUT, "queue": "q", **counts, **more}


def _queue(name: str, **counts: Any) -> dict[str, Any]:
    return {"source": "rabbitmq", "queue": name, **counts}


def _accounting(*rows: dict[str, Any], counters: tuple[dict[str, Any], ...] = ()) -> Accounting:
    return Accounting.from_json({"per_sender": list(rows), "sut_counters": list(counters)})


def test_a_sut_that_dropped_what_it_acknowledged_fails_and_is_named() -> None:
    failure, invalid = accounting_verdict(_accounting(_row("s1/0", 1000, 1000, 900)), 0.0)
    assert failure == (
        f"sender s1/0: the SUT ({_SUT}) accepted 1,000 messages and delivered 900: it dropped 100 it had acknowledged"
    )
    assert invalid == []


def test_where_some_were_not_acknowledged_the_drop_is_a_lower_bound() -> None:
    # 1,000 sent, 950 accepted (50 nacked, which may have arrived all the same), 900 received:
    # at least 50 of the accepted never came.
    failure, _ = accounting_verdict(_accounting(_row("s1/0", 1000, 950, 900)), 0.0)
    assert failure is not None and failure.endswith(
        "accepted 950 messages and delivered 900: it dropped at least 50 it had acknowledged"
    )


def test_at_most_once_may_drop_and_at_least_once_may_duplicate() -> None:
    # Nothing acknowledged (QoS 0): 100 of 1,000 gone is no breach of a guarantee.
    assert accounting_verdict(_accounting(_row("s1/0", 1000, None, 900)), 0.0) == (None, [])
    # Everything accepted came, some twice (duplicates are not in the distinct count).
    assert accounting_verdict(_accounting(_row("s1/0", 1000, 1000, 1000, duplicates=7)), 0.0) == (None, [])
    # Not accepted and not received: the SUT said so, it kept its word.
    assert accounting_verdict(_accounting(_row("s1/0", 1000, 900, 900)), 0.0) == (None, [])


def test_the_users_loss_bound_covers_accepted_messages_too() -> None:
    # 10 of 1,000 accepted dropped: 1 %, within a 1 % bound, over a 0.9 % one.
    assert accounting_verdict(_accounting(_row("s1/0", 1000, 1000, 990)), 0.01) == (None, [])
    assert accounting_verdict(_accounting(_row("s1/0", 1000, 1000, 990)), 0.009)[0] is not None


def test_more_received_than_sent_cannot_be_reconciled() -> None:
    failure, invalid = accounting_verdict(_accounting(_row("s2/1", 500, 500, 501)), 0.0)
    assert failure is None
    assert invalid == [
        "sender s2/1: 501 of its messages were received but it sent 500: the counts cannot be reconciled"
    ]


def test_the_first_sender_is_named_with_how_many_more_and_the_sut_counters_witness() -> None:
    counters = (
        {
            "source": "rabbitmq",
            "queue": "other",
            "published": 9,
            "delivered": 0,
            "left": 0,
            "dropped": 9,
            "caught_up": True,
        },
        {
            "source": "rabbitmq",
            "queue": "q",
            "published": 2000,
            "delivered": 1750,
            "left": 0,
            "dropped": 250,
            "caught_up": True,
        },
    )
    accounting = _accounting(_row("s1/0", 1000, 1000, 900), _row("s1/1", 1000, 1000, 850), counters=counters)
    failure, _ = accounting_verdict(accounting, 0.0)
    assert failure == (
        f"sender s1/0: the SUT ({_SUT}) accepted 1,000 messages and delivered 900: it dropped 100 it had acknowledged; "
        "its own counters agree: queue q took 2,000, delivered 1,750, held 0 and dropped 250 (and 1 more senders)"
    )


def test_judge_tells_the_loss_as_the_suts_breach() -> None:
    summary: dict[str, Any] = {
        "sent": 1000,
        "lost": 100,
        "send_rate": {"mean": 100.0},
        "latency_samples": 900,
        "latency_us": {"p50": 1000.0},
        "peers": [],
        "accounting": _accounting(_row("s1/0", 1000, 1000, 900)).to_json(),
    }
    verdict = judge(TestFigures.from_json(summary), FixedRateTest(send_url=_SUT, rate=100))
    assert verdict.failure is not None and verdict.failure.startswith("sender s1/0: the SUT")
    # Without an accepted count (at most once) the loss is still a loss, by the loss bound.
    summary["accounting"] = _accounting(_row("s1/0", 1000, None, 900)).to_json()
    verdict = judge(TestFigures.from_json(summary), FixedRateTest(send_url=_SUT, rate=100))
    assert verdict.failure == "lost 100 of 1,000 messages (10%; bound 0%)"
    # A bound that allows the loss allows it for accepted messages too.
    summary["accounting"] = _accounting(_row("s1/0", 1000, 1000, 900)).to_json()
    lenient = FixedRateTest(send_url=_SUT, rate=100, fail=Fail(max_loss_ratio=0.1))
    assert judge(TestFigures.from_json(summary), lenient).failure is None


def test_sut_counters_read_before_they_caught_up_are_not_cited() -> None:
    # Publishes counted, deliveries not yet: "dropped 1,000" would be a figure of the reading.
    stale = {
        "source": "rabbitmq",
        "queue": "q",
        "published": 1000,
        "delivered": 0,
        "left": 0,
        "dropped": 1000,
        "caught_up": False,
    }
    failure, _ = accounting_verdict(_accounting(_row("s1/0", 1000, 1000, 900), counters=(stale,)), 0.0)
    assert failure is not None and failure.endswith("it dropped 100 it had acknowledged")


_KAFKA = "kafka://127.0.0.1:9092/t?acks=all"


def _kafka_row(sender: str, accepted: int, received: int) -> dict[str, Any]:
    return _row(sender, accepted, accepted, received, sut=_KAFKA, queue=None, topic="t")


def _topic(took: int, kept: int, deleted: int, caught_up: bool = True) -> dict[str, Any]:
    return {"source": "kafka", "topic": "t", "took": took, "kept": kept, "deleted": deleted, "caught_up": caught_up}


def test_a_kafka_topic_that_deleted_what_its_receivers_never_got_is_named_with_its_own_counters() -> None:
    # 1,000 taken and acknowledged, 600 received; retention moved the low watermark past 700 of
    # them, 300 are still there: at least 100 of the 400 missing went unread.
    accounting = _accounting(_kafka_row("s1/0", 1000, 600), counters=(_topic(1000, kept=300, deleted=700),))
    failure, invalid = accounting_verdict(accounting, 0.0)
    assert failure == (
        f"sender s1/0: the SUT ({_KAFKA}) accepted 1,000 messages and delivered 600: it dropped 400 it had "
        "acknowledged; its own counters agree: topic t took 1,000, kept 300 and deleted 700 (its low watermark "
        "moved past them)"
    )
    assert invalid == []


def test_a_kafka_topic_that_still_holds_what_was_missed_did_not_drop_it() -> None:
    # Nothing deleted: every message the topic took is still in it, so the 400 the receivers
    # missed were not dropped by the broker. The loss bound judges that loss, not this.
    accounting = _accounting(_kafka_row("s1/0", 1000, 600), counters=(_topic(1000, kept=1000, deleted=0),))
    assert accounting_verdict(accounting, 0.0) == (None, [])
    summary: dict[str, Any] = {"sent": 1000, "lost": 400, "send_rate": {"mean": 100.0}, "peers": []}
    summary |= {"latency_samples": 600, "latency_us": {"p50": 1000.0}, "accounting": accounting.to_json()}
    assert judge(TestFigures.from_json(summary), FixedRateTest(send_url=_KAFKA, rate=100)).failure == (
        "lost 400 of 1,000 messages (40%; bound 0%)"
    )


def test_kafka_counters_are_no_witness_where_the_topic_may_hold_the_missing_or_had_not_caught_up() -> None:
    missing_400 = _kafka_row("s1/0", 1000, 600)
    plain = (
        f"sender s1/0: the SUT ({_KAFKA}) accepted 1,000 messages and delivered 600: it dropped 400 it had acknowledged"
    )
    # Some deleted, but the 500 kept could be the 400 missing: the counters tell nothing.
    assert accounting_verdict(_accounting(missing_400, counters=(_topic(1000, 500, 500),)), 0.0)[0] == plain
    # Read before they counted ours (or numbered in batches): shown, never cited, nor an excuse.
    stale = _topic(900, kept=900, deleted=0, caught_up=False)
    assert accounting_verdict(_accounting(missing_400, counters=(stale,)), 0.0)[0] == plain


def test_a_topics_witness_weighs_what_all_its_senders_missed() -> None:
    # Two senders, 150 + 100 missing of 2,000; the topic keeps 200 of them: at least 50 went unread.
    rows = (_kafka_row("s1/0", 1000, 850), _kafka_row("s1/1", 1000, 900))
    failure, _ = accounting_verdict(_accounting(*rows, counters=(_topic(2000, 200, 1800),)), 0.0)
    assert failure is not None and failure.endswith(
        "its own counters agree: topic t took 2,000, kept 200 and deleted 1,800 (its low watermark moved past them)"
        " (and 1 more senders)"
    )
    # Keeping 250, it may hold every one of them.
    failure, _ = accounting_verdict(_accounting(*rows, counters=(_topic(2000, 250, 1750),)), 0.0)
    assert failure is not None and "its own counters" not in failure


def test_every_message_arriving_again_is_a_run_that_measured_copies() -> None:
    """#41 (a hostile pass): a stream read by two clients without %d gave 100 % duplicates, a
    doubled receive rate, and success. Nearly every message twice is invalid; a few are not."""
    summary: dict[str, Any] = {
        "sent": 1000,
        "received": 1000,
        "lost": 0,
        "duplicates": 1000,
        "send_rate": {"mean": 100.0},
        "latency_samples": 2000,
        "latency_us": {"p50": 1000.0},
        "peers": [],
    }
    (why,) = judge(TestFigures.from_json(summary), FixedRateTest(send_url=_SUT, rate=100)).invalid
    assert why.startswith("every message arrived 2.0 times on average (1,000 duplicates of 1,000 received)"), why
    assert "give each its own with %d" in why
    summary["duplicates"] = 899  # below 90 %: a SUT's redeliveries, at least once's right
    assert judge(TestFigures.from_json(summary), FixedRateTest(send_url=_SUT, rate=100)).invalid == ()
    summary["duplicates"] = 900
    assert len(judge(TestFigures.from_json(summary), FixedRateTest(send_url=_SUT, rate=100)).invalid) == 1


# Qpid Dispatch Router 1.19.0, in real runs of the tool through it (tests/support/qdrouter_runs/README.md).
_THIEF = "amqp10://127.0.0.1:5673/maestro.thief?settle=at-least-once"
_THIEF_DROPPED = (
    f"sender s1/0: the SUT ({_THIEF}) accepted 995 messages and delivered 886: it dropped at least 109 it had "
    "acknowledged"
)


def test_a_routers_counters_say_it_passed_on_what_a_second_consumer_took() -> None:
    # A consumer outside the test accepted 109 of the 995 the router acknowledged: the router's
    # links show two consumers that accepted all 995, 109 more than the receiver got.
    failure, invalid = accounting_verdict(run_accounting("second-consumer"), 0.0)
    assert failure == (
        f"{_THIEF_DROPPED}; the router's own counters say it passed them on: address maestro.thief took 1,000 and "
        "its 2 consumer links accepted 995, 109 more than the test's receivers got"
    )
    assert invalid == []
    # 109 of 995 (10.95 %) is within an 11 % bound.
    assert accounting_verdict(run_accounting("second-consumer"), 0.11) == (None, [])


def test_a_routers_reading_from_before_the_last_deliveries_is_not_cited(tmp_path: Path) -> None:
    # Read no later than 08:37:28.6, the router had taken 994 (the address's count) of the 995 it
    # acknowledged: not caught up, so the reason is the tool's counts alone.
    folder = cut_before("second-consumer", "2026-11-28T08:37:29", tmp_path)
    accounting = run_accounting("second-consumer", folder)
    assert [(c.took, c.caught_up) for c in accounting.sut_counters] == [(994, False)]
    assert accounting_verdict(accounting, 0.0) == (_THIEF_DROPPED, [])


def test_a_router_that_gave_back_what_it_could_not_deliver_broke_no_promise() -> None:
    # Released and modified deliveries were never accepted: the sender knew (875 accepted, 875
    # received). The loss is the loss bound's to judge.
    assert accounting_verdict(run_accounting("consumer-left"), 0.0) == (None, [])
    assert accounting_verdict(run_accounting("clean"), 0.0) == (None, [])


def _address(caught_up: bool = True, **counts: int) -> dict[str, Any]:
    base = {"took": 1000, "delivered": 900, "released": 0, "modified": 0, "links_out": 1}
    return {"source": "router", "address": "a", "caught_up": caught_up} | base | counts


def test_a_router_that_acknowledged_what_no_consumer_accepted_is_a_witness() -> None:
    # Not seen in the runs above (Qpid Dispatch Router acknowledges a delivery when its consumer
    # accepts it): counts made by hand, as a router that settled for its consumers would show.
    row = _row("s1/0", 1000, 1000, 900, sut="amqp10://router:5672/a", queue=None)
    dropped = _address(accepted=1000, consumers_accepted=900, dropped=100)
    failure, _ = accounting_verdict(_accounting(row, counters=(dropped,)), 0.0)
    assert failure == (
        "sender s1/0: the SUT (amqp10://router:5672/a) accepted 1,000 messages and delivered 900: it dropped 100 it "
        "had acknowledged; its own counters agree: address a took 1,000, delivered 900, released 0, modified 0 and "
        "acknowledged 100 that no consumer accepted"
    )
    plain = failure.split(";")[0]
    # Not caught up, another address, or consumers that accepted no more than the receivers got: no witness.
    assert accounting_verdict(_accounting(row, counters=(dropped | {"caught_up": False},)), 0.0)[0] == plain
    assert accounting_verdict(_accounting(row, counters=(dropped | {"address": "b"},)), 0.0)[0] == plain
    quiet = _address(accepted=1000, consumers_accepted=900, dropped=0)
    assert accounting_verdict(_accounting(row, counters=(quiet,)), 0.0)[0] == plain

"""A queue's rates where RabbitMQ's read 0 while its counters moved (#40: a test's own queue read
0 msg/s at a 1 s interval): known answers for a counter RabbitMQ refreshes every 5 s."""

from __future__ import annotations

from inspector.sources import RefreshedRates

KEY = ("/", "q", "publish")


def test_a_new_queue_has_no_rate_until_two_refreshes_then_their_rise_over_their_time() -> None:
    rates = RefreshedRates()
    # Sampled each second; the counter moves at RabbitMQ's refreshes (t = 5, 10, 15 s), 200 msg/s.
    seen = [rates.rate(KEY, 0, 0.0, t) for t in (0.0, 1.0, 2.0, 3.0, 4.0)]
    # The first rise: when its messages began is not known (before the first sample, maybe).
    seen += [rates.rate(KEY, 1000, 0.0, t) for t in (5.0, 6.0, 7.0, 8.0, 9.0)]
    seen += [rates.rate(KEY, 2000, 0.0, t) for t in (10.0, 11.0, 12.0, 13.0, 14.0)]  # RabbitMQ still says 0
    assert seen == [0.0] * 5 + [None] * 5 + [200.0] * 5
    assert rates.rate(KEY, 3000, 199.5, 15.0) == 199.5  # RabbitMQ's own rate: taken as it is


def test_a_stopped_queue_reads_0_once_a_refresh_is_overdue() -> None:
    rates = RefreshedRates()
    rates.rate(KEY, 0, 0.0, 0.0)
    rates.rate(KEY, 100, 0.0, 1.0)
    assert rates.rate(KEY, 600, 0.0, 6.0) == 100.0
    assert rates.rate(KEY, 600, 0.0, 11.5) == 100.0  # within a refresh of the change
    assert rates.rate(KEY, 600, 0.0, 11.6) == 0.0  # a refresh came and the count did not move
    rates.rate(("/", "r", "publish"), 0, 0.0, 0.0)
    assert rates.rate(("/", "r", "publish"), 50, 0.0, 1.0) is None
    assert rates.rate(("/", "r", "publish"), 50, 0.0, 6.6) == 0.0  # unknown, then overdue: stopped


def test_a_rate_rabbitmq_has_no_details_of_yet_stays_unknown() -> None:
    """A new queue whose publishes RabbitMQ has not refreshed yet: counts but no `*_details`
    (the inspector's None), where its deliveries had already moved (a hostile pass: 0.0 for 4 s)."""
    rates = RefreshedRates()
    assert rates.rate(KEY, 0, None, 0.0) is None
    assert rates.rate(KEY, 0, None, 1.0) is None
    assert rates.rate(KEY, 478, None, 4.0) is None  # the first rise: its start unknown
    assert rates.rate(KEY, 478, None, 10.0) is None  # overdue, and still no word from RabbitMQ
    assert rates.rate(KEY, 478, 0.0, 11.0) == 0.0  # RabbitMQ's word: stopped


def test_first_sight_and_a_queue_made_again_take_rabbitmqs_rate_but_not_its_first_0() -> None:
    rates = RefreshedRates()
    assert rates.rate(KEY, 5000, 42.0, 0.0) == 42.0  # a queue that was there before the test
    # RabbitMQ's 0 with messages counted: a new queue's first refresh, or a stopped one; which,
    # a refresh tells (a new queue first seen at 176 read 0 for 5 s at 200 msg/s).
    assert rates.rate(KEY, 5000, 0.0, 1.0) is None  # no rise seen yet: unknown for a refresh
    assert rates.rate(KEY, 10, 0.0, 2.0) is None  # deleted and made again: counts start over
    assert rates.rate(KEY, 10, 0.0, 6.0) is None
    assert rates.rate(KEY, 510, 0.0, 7.0) is None  # the first rise: its start unknown
    assert rates.rate(KEY, 1010, 0.0, 12.0) == 100.0
    idle = ("/", "other", "publish")  # each queue its own
    assert rates.rate(idle, 510, 0.0, 6.0) is None
    assert rates.rate(idle, 510, 0.0, 11.6) == 0.0  # a refresh overdue and no rise: idle

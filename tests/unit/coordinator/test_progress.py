"""The progress line a person or a CI log reads: no figure before there is one, never past the
test's length, and a line a second without a terminal."""

from __future__ import annotations

import io
import time
from dataclasses import replace

from coordinator.running.progress import Progress
from protocol.notes import Header, StatsReport


def _report(peer: str, elapsed_s: float, **counters: float) -> StatsReport:
    note = StatsReport(test_id="t1", elapsed_s=elapsed_s, counters=counters)
    return replace(note, header=Header(sender_name=peer))


def test_no_latency_is_shown_before_a_receiver_reported_one() -> None:
    progress = Progress(10.0, stream=io.StringIO())
    progress.feed(_report("s1", 1.0, sent=100))
    progress.feed(_report("s1", 2.0, sent=300))
    assert "sent 300 (200/s)" in progress.line() and "p99" not in progress.line()
    progress.feed(_report("r1", 1.0, received=90, latency_p99_us=2_500))
    assert progress.line().endswith("received 90 (0/s)  p99 2.50 ms")


def test_a_closed_system_shows_its_requests_replies_and_response_time() -> None:
    """#40: a request/reply run's line read "p99 1.92 ms", its replier's request leg, where the
    response time's p99 was 5.7 ms."""
    progress = Progress(10.0, stream=io.StringIO(), closed=True)
    assert progress.line().endswith("requests 0 (0/s)  replies 0 (0/s)  timed out 0")  # before any report
    progress.feed(_report("q1", 1.0, sent=100, replies=99, timed_out=0, response_p99_us=5_700))
    progress.feed(_report("q1", 2.0, sent=700, replies=698, timed_out=1, response_p99_us=5_747))
    progress.feed(_report("p1", 2.0, received=699, latency_p99_us=1_920))
    assert progress.line().endswith("requests 700 (600/s)  replies 698 (599/s)  timed out 1  response p99 5.75 ms"), (
        progress.line()
    )
    assert "1.92" not in progress.line()


def test_the_clock_stops_at_the_tests_length() -> None:
    progress = Progress(6.0, stream=io.StringIO())
    progress._started = time.monotonic() - 7.4  # the drain after a 6 s load
    assert progress.line().startswith(f"[{'#' * 24}]     6/6 s")
    progress = Progress(6.0, stream=io.StringIO())
    progress._started = time.monotonic() - 3.0
    assert progress.line().startswith(f"[{'#' * 12}{'.' * 12}]     3/6 s")


def test_without_a_terminal_a_line_each_interval() -> None:
    log = io.StringIO()
    progress = Progress(60.0, stream=log, interval_s=0.05)
    for _ in range(3):
        progress.show()
        progress.show()  # a second report within the interval prints nothing
        time.sleep(0.06)
    assert len(log.getvalue().splitlines()) == 3


def test_the_end_adds_no_line_a_log_already_has() -> None:
    log = io.StringIO()
    progress = Progress(6.0, stream=log)
    progress._started = time.monotonic() - 7.0
    progress.show()
    progress.done("senders done")
    assert log.getvalue().splitlines() == [progress.line(), "senders done"]
    progress.feed(_report("s1", 7.0, sent=600))  # something new since: the end shows it
    progress.done("senders done")
    assert log.getvalue().splitlines()[2:] == [progress.line(), "senders done"]

from __future__ import annotations

import logging

import pytest

from protocol.log_throttle import MAX_LINE_CHARS, OTHER_SENDERS, LogThrottle


def test_one_line_per_sender_a_minute_and_the_next_counts_what_was_left_out() -> None:
    throttle = LogThrottle(every_s=60.0)
    assert throttle.admit("a", 0.0) == ("a", 0)
    assert [throttle.admit("a", t) for t in (1.0, 30.0, 59.9)] == [None, None, None]
    assert throttle.admit("b", 10.0) == ("b", 0)  # another sender has a line of its own
    assert throttle.admit("a", 60.0) == ("a", 3)
    assert throttle.admit("a", 61.0) is None


def test_made_up_senders_past_the_limit_share_one_line() -> None:
    throttle = LogThrottle(every_s=60.0, max_senders=3)
    admitted = [throttle.admit(f"fuzz-{n}", 1.0) for n in range(1000)]
    assert [a for a in admitted if a is not None] == [("fuzz-0", 0), ("fuzz-1", 0), ("fuzz-2", 0), (OTHER_SENDERS, 0)]
    # A minute on, the quiet ones are forgotten and new ones get lines again.
    assert throttle.admit("fuzz-5000", 62.0) == ("fuzz-5000", 0)


def test_a_flood_logs_a_bounded_number_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    throttle = LogThrottle(every_s=60.0, max_senders=20)
    logger = logging.getLogger("test.flood")
    with caplog.at_level(logging.WARNING, logger="test.flood"):
        for n in range(10_000):
            throttle.log(logger, f"fuzz-{n % 1000}", f"bad note {n}")
    assert 0 < len(caplog.records) <= 21


def test_a_sender_that_names_itself_with_a_megabyte_writes_a_line_of_bounded_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#38: 25 notes with 1 MB names wrote 20 MB of log in a minute; the line is cut, and names
    that differ only past their first 128 characters are one sender."""
    throttle = LogThrottle(every_s=60.0)
    logger = logging.getLogger("test.bignames")
    with caplog.at_level(logging.WARNING, logger="test.bignames"):
        for n in range(25):
            name = "x" * 1_000_000 + str(n)
            throttle.log(logger, name, f"refused a note from {name}: bad signature")
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line) < MAX_LINE_CHARS + 100 and line.endswith("(999,536 characters more)"), line[-80:]

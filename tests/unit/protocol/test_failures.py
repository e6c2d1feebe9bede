"""A failure's text: its kind and message, or where it was raised when it has no message."""

from __future__ import annotations

import concurrent.futures

from protocol.failures import describe


def test_a_failure_with_a_message_reads_kind_and_message() -> None:
    assert describe(ValueError("bad size '12 parsecs'")) == "ValueError: bad size '12 parsecs'"


def test_a_failure_without_a_message_names_where_it_was_raised() -> None:
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    try:
        future.result(timeout=0.001)  # raises TimeoutError() with no message
    except TimeoutError as exc:
        text = describe(exc)
    assert text.startswith("TimeoutError (no message) at test_failures.py:"), text
    assert text.endswith("in test_a_failure_without_a_message_names_where_it_was_raised"), text


def test_a_failure_never_raised_is_its_kind() -> None:
    assert describe(TimeoutError()) == "TimeoutError"

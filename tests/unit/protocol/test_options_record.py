"""One typed record of a test's options, with the defaults in one place, built by the one parser
family; and SUT URLs checked once for the coordinator and the drivers alike."""

from __future__ import annotations

import re

import pytest

from coordinator import Fail, FixedRateTest
from coordinator.definitions import DefinitionError
from protocol.fail import FailConditions
from protocol.options import Duration, MessageSize, OptionError, TestOptions, parse_options
from protocol.parsing import boolean
from protocol.sut_url import SutUrlError, parse_sut_url


def test_what_set_gave_is_typed_and_the_rest_keeps_its_default() -> None:
    options = TestOptions.from_parsed(
        parse_options({"rate_per_s": "50", "duration": "2m", "send_url": "amqp://h/q", "fail_latency_ms": 5})
    )
    assert options.rate_per_s == 50.0 and options.duration_s == 120.0 and options.count is None
    assert options.send_url == ("amqp://h/q",)
    assert options.fail == FailConditions(latency_ms=5.0)
    assert options.message_size == MessageSize(256, 256) and options.parallel_count == 1
    assert TestOptions.from_parsed(parse_options({"duration": 500})).duration == Duration(messages=500)


def test_the_definitions_fail_conditions_are_the_peers() -> None:
    fail = Fail(latency_ms=10, stall_s=5, inspector_errors=3)
    assert FailConditions.from_options(parse_options(fail.options())) == fail
    with pytest.raises(OptionError, match="fail_latency_policy"):
        Fail(latency_policy="sometimes")


@pytest.mark.parametrize("word", ["true", "yes", "on", "1", "TRUE"])
def test_every_parser_reads_true_the_same_way(word: str) -> None:
    assert boolean(word) is True
    assert parse_options({"precise_timing": word})["precise_timing"] is True
    assert parse_sut_url(f"amqp://h/q?confirms={word}").options["confirms"] is True


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("amqpx://h/q", "the scheme must be one of"),
        ("amqp://h/q?qos=1", "unknown option 'qos' for amqp://"),
        ("mqtt://h/t?qos=3", "option 'qos': 3 is out of range (0 to 2)"),
        ("kafka:///t", "names no host"),
        ("amqp://u:secret@h/q?prefetch=x", "expected a number"),
    ],
)
def test_a_url_no_driver_would_take_is_refused_in_the_definition(url: str, why: str) -> None:
    with pytest.raises(SutUrlError, match=re.escape(why)) as caught:
        parse_sut_url(url)
    assert "secret" not in str(caught.value)
    with pytest.raises(DefinitionError, match=re.escape(why)):
        FixedRateTest(send_url=url, rate=10)
    with pytest.raises(OptionError, match=re.escape(why)):
        parse_options({"send_url": url})

from __future__ import annotations

import random
from dataclasses import fields

import pytest

from coordinator.definitions.fixed_rate import SCRIPT_NAMES, FixedRateTest
from protocol.fail import FailConditions
from protocol.options import (
    OPTIONS,
    Delay,
    Duration,
    MessageSize,
    OptionError,
    TestOptions,
    parse_delay,
    parse_duration,
    parse_message_size,
    parse_options,
    parse_seconds,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("120s", 120.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1d1h1m1s", 90061.0),
        (90, 90.0),
        ("2.5", 2.5),
        ("1.5m", 90.0),
    ],
)
def test_times(text: object, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("bad", ["10 minutes", "m", "", "-5s", "1x", True])
def test_bad_times(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_seconds(bad)


def test_durations_are_a_time_or_a_count() -> None:
    assert parse_duration("10m") == Duration(seconds=600.0)
    assert parse_duration(1000) == Duration(messages=1000)
    assert parse_duration("1000") == Duration(messages=1000)
    assert parse_duration("5000 messages") == Duration(messages=5000)
    with pytest.raises(ValueError, match="positive"):
        parse_duration(0)


def test_message_sizes() -> None:
    assert parse_message_size(256) == MessageSize(256, 256)
    assert parse_message_size("1kb") == MessageSize(1000, 1000)
    assert parse_message_size("2MiB") == MessageSize(2 * 1024 * 1024, 2 * 1024 * 1024)
    # Maestro's "~N" is N +- 5 %.
    assert parse_message_size("~200") == MessageSize(190, 210)
    assert parse_message_size("100-1000") == MessageSize(100, 1000)
    assert parse_message_size(12).fixed
    for bad in ["0", "1000-100", "lots", "200MiB"]:
        with pytest.raises(ValueError):
            parse_message_size(bad)


def test_parse_options_normalises_every_value() -> None:
    parsed = parse_options(
        {
            "rate_per_s": "1000",
            "parallel_count": 5,
            "duration": "10s",
            "precise_timing": "true",
            "send_url": "amqp://a:5672/q,amqp://b:5672/q",
        }
    )
    assert parsed == {
        "rate_per_s": 1000.0,
        "parallel_count": 5,
        "duration": Duration(seconds=10.0),
        "precise_timing": True,
        "send_url": ["amqp://a:5672/q", "amqp://b:5672/q"],
    }


@pytest.mark.parametrize(
    ("raw", "name", "fragment"),
    [
        ({"rate": 5}, "rate", "unknown option"),
        ({"rate_per_s": -1}, "rate_per_s", "out of range"),
        ({"parallel_count": 2.5}, "parallel_count", "whole number"),
        ({"send_url": "http://x/q"}, "send_url", "scheme must be one of"),
        ({"send_url": "amqp:///q"}, "send_url", "names no host"),
        # Driver options belong in the URL: accepted here, they would be ignored.
        ({"qos": 1}, "qos", "SUT URL's query string (?qos=1"),
        ({"ack_mode": "manual"}, "ack_mode", "SUT URL's query string (?ack=manual"),
        ({"kafka": {"acks": "all"}}, "kafka", "SUT URL's query string"),
        ({"data_server_url": "ftp://x"}, "data_server_url", "http"),
    ],
)
def test_a_bad_option_is_named(raw: dict[str, object], name: str, fragment: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_options(raw)
    assert caught.value.name == name
    assert f"option {name!r}" in str(caught.value)
    assert fragment in str(caught.value)


def test_delays_are_fixed_or_exponential_around_their_mean() -> None:
    assert parse_delay("5ms") == Delay(0.005) and parse_delay(0) == Delay(0.0)
    exponential = parse_delay("exp:10ms")
    assert exponential == Delay(0.010, exponential=True) and str(exponential) == "exp:10ms"
    assert parse_delay(str(exponential)) == exponential  # as SET carries it
    rng = random.Random(5)
    assert Delay(0.005).sample_s(rng) == 0.005
    samples = [exponential.sample_s(rng) for _ in range(40_000)]
    # An exponential's mean is its mean, and its standard deviation too (within 2 % at 40,000).
    mean = sum(samples) / len(samples)
    deviation = (sum((x - mean) ** 2 for x in samples) / len(samples)) ** 0.5
    assert mean == pytest.approx(0.010, rel=0.02) and deviation == pytest.approx(0.010, rel=0.02)
    with pytest.raises(ValueError, match="exponential one around a mean"):
        parse_delay("exp:soon")
    with pytest.raises(OptionError, match="option 'think_time'"):
        parse_options({"think_time": "-5ms"})


def test_a_scripts_defaults_are_the_set_options_defaults() -> None:
    """One place for defaults: a test left at its defaults sets each option to what a peer
    given no SET at all would use."""
    test = FixedRateTest(send_url="amqp://h/q")
    sent = TestOptions.from_parsed(parse_options(test.sender_options(test.all_flows()[0], "t1")))
    defaults = TestOptions()
    for name in SCRIPT_NAMES.values():
        assert getattr(sent, name) == getattr(defaults, name), name
    assert sent.fail == defaults.fail


def test_every_set_option_is_a_field_with_its_parser() -> None:
    typed = {f.name for f in fields(TestOptions) if f.name != "fail"}
    assert set(OPTIONS) == typed | {f"fail_{f.name}" for f in fields(FailConditions)}
    with pytest.raises(OptionError, match="option 'fail_stall_s'"):
        parse_options({"fail_stall_s": "soon"})

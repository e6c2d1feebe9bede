"""Test options carried by SET: one table of names (`TestOptions`), each with its default and the
parser that checks it.

A SET names options by key; the peer parses every value before storing any, so a bad option
is refused as a whole with a message naming it, before any load starts. Roles add their own
checks on top (a driver knows its URL options).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar
from urllib.parse import urlsplit

from protocol.fail import FailConditions
from protocol.parsing import OptionError, boolean, choice, number, parse_seconds, text
from protocol.sut_url import parse_sut_url, split_urls

__all__ = [
    "OPTIONS",
    "Delay",
    "Duration",
    "MessageSize",
    "OptionError",
    "ProfileStep",
    "TestOptions",
    "parse_delay",
    "parse_duration",
    "parse_message_size",
    "parse_options",
    "parse_profile",
    "parse_seconds",
]


@dataclass(frozen=True)
class Duration:
    """How long a run lasts: a time or a message count (exactly one is set)."""

    seconds: float | None = None
    messages: int | None = None

    def __str__(self) -> str:
        return f"{self.seconds:g}s" if self.seconds is not None else f"{self.messages} messages"

    def messages_for(self, client: int, clients: int) -> int | None:
        """A message count is for the whole worker, spread evenly over its clients; None for a time."""
        if self.messages is None:
            return None
        share, extra = divmod(self.messages, clients)
        return share + (1 if client < extra else 0)


@dataclass(frozen=True)
class MessageSize:
    """Bytes per message: fixed (`256`), around a value (`~256`, +-5% as Maestro), or a range."""

    min_bytes: int
    max_bytes: int

    @property
    def fixed(self) -> bool:
        return self.min_bytes == self.max_bytes

    @property
    def mean_bytes(self) -> float:
        """A sender draws each size uniformly from the range (worker.sender)."""
        return (self.min_bytes + self.max_bytes) / 2


def mean_message_bytes(value: Any) -> float | None:
    """The mean bytes of a message of a test's `size` (for MB/s); None for a size that is not one."""
    try:
        return parse_message_size(value).mean_bytes
    except (TypeError, ValueError):
        return None


def megabytes_per_s(per_s: float, size: Any) -> float | None:
    """A message rate in MB/s (10^6 B, as PerfTest's) at a test's `size` (a range by its mean);
    None where the size is not one."""
    mean = mean_message_bytes(size) if size is not None else None
    return per_s * mean / 1e6 if mean else None


_SIZE = re.compile(r"^(\d+)\s*(b|kb|kib|mb|mib)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000_000, "mib": 1024 * 1024}
MAX_MESSAGE_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Delay:
    """A time taken on purpose: a replier's service time, a requester's think time. Fixed
    (`"5ms"`) or exponential around a mean (`"exp:10ms"`: a Poisson process's gaps)."""

    mean_s: float = 0.0
    exponential: bool = False

    def sample_s(self, rng: random.Random) -> float:
        if not self.mean_s:
            return 0.0
        return rng.expovariate(1 / self.mean_s) if self.exponential else self.mean_s

    def __str__(self) -> str:
        return f"{'exp:' if self.exponential else ''}{self.mean_s * 1000:g}ms"


def parse_delay(value: Any) -> Delay:
    if isinstance(value, Delay):
        return value
    text = str(value).strip().lower()
    exponential = text.startswith("exp:")
    try:
        return Delay(parse_seconds(text[4:] if exponential else value), exponential)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a time (5ms) or an exponential one around a mean (exp:5ms)") from exc


def parse_duration(value: Any) -> Duration:
    """A time (`120s`, `10m`) or a message count (`1000`, `"1000 messages"`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("a message count must be positive")
        return Duration(messages=value)
    text = str(value).strip().lower()
    count = re.fullmatch(r"(\d+)\s*(msgs?|messages?)?", text)
    if count:
        return Duration(messages=_positive(int(count.group(1)), "a message count"))
    return Duration(seconds=_positive(parse_seconds(text), "a duration"))


def parse_message_size(value: Any) -> MessageSize:
    if isinstance(value, int) and not isinstance(value, bool):
        return _size_range(value, value)
    text = str(value).strip()
    if text.startswith("~"):
        middle = _bytes(text[1:])
        spread = max(1, middle * 5 // 100) if middle > 1 else 0
        return _size_range(middle - spread, middle + spread)
    if "-" in text:
        low, high = text.split("-", 1)
        return _size_range(_bytes(low), _bytes(high))
    size = _bytes(text)
    return _size_range(size, size)


def _bytes(text: str) -> int:
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size such as 256, 1kb or 2MiB")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]


def _size_range(low: int, high: int) -> MessageSize:
    if low < 1 or high > MAX_MESSAGE_BYTES or low > high:
        raise ValueError(f"sizes must lie within 1 byte and {MAX_MESSAGE_BYTES} bytes, lowest first")
    return MessageSize(low, high)


_N = TypeVar("_N", int, float)


def _positive(value: _N, what: str) -> _N:
    if value <= 0:
        raise ValueError(f"{what} must be positive")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError("expected a map with string keys")
    return dict(value)


@dataclass(frozen=True)
class ProfileStep:
    """From `at_s` into the run (after the common start), each client sends `rate_per_s`, and
    only the first `parallel` clients send."""

    at_s: float
    rate_per_s: float
    parallel: int


def parse_profile(value: Any) -> tuple[ProfileStep, ...]:
    """A test profile (seed 004 §3.1): `[[0, 100, 2], ["30s", 200, 4], …]` as (at, rate per
    client, clients); the first step starts at 0 and the times rise."""
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("expected a list of [at, rate_per_client, parallel] steps")
    steps: list[ProfileStep] = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 3:
            raise ValueError(f"step {item!r}: expected [at, rate_per_client, parallel]")
        at, rate, parallel = item
        step = ProfileStep(parse_seconds(at), float(number(0)(rate)), int(number(1, 100_000, integer=True)(parallel)))
        if steps and step.at_s <= steps[-1].at_s:
            raise ValueError(f"step at {step.at_s:g} s: the times must rise")
        steps.append(step)
    if steps[0].at_s != 0:
        raise ValueError("the first step must start at 0")
    return tuple(steps)


def _sut_urls(value: Any) -> list[str]:
    """One URL, a comma-separated list (cluster nodes, round robin), or a list of URLs."""
    if not isinstance(value, str | list) or not all(isinstance(u, str) for u in value):
        raise ValueError("expected a URL or a list of URLs")
    urls = split_urls(value)
    if not urls:
        raise ValueError("expected a URL or a list of URLs")
    for url in urls:
        parse_sut_url(url)  # scheme, host, destination and every query option, or SutUrlError
    return urls


def _http_url(value: Any) -> str:
    url = text(value)
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url


def _parses(parser: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    return {"parse": parser}


@dataclass(frozen=True)
class TestOptions:
    """A test's options as SET carries them and a peer holds them: the one table of their names
    (which say their units; DESIGN.md "Test options"), each with its default and the parser
    that checks it. A peer builds this from what SET gave, every time SET changes it, and reads
    fields, never a dict with a default. The fail conditions are their own record
    (protocol.fail), as `fail_<field>` options."""

    test_id: str = field(default="", metadata=_parses(text))
    send_url: tuple[str, ...] = field(default=(), metadata=_parses(_sut_urls))
    receive_url: tuple[str, ...] = field(default=(), metadata=_parses(_sut_urls))
    # Per client; 0 = as fast as the SUT takes it.
    rate_per_s: float = field(default=100.0, metadata=_parses(number(0)))
    arrivals: str = field(default="uniform", metadata=_parses(choice("uniform", "poisson")))
    # The rate and the clients changing during the run; overrides rate_per_s.
    profile: tuple[ProfileStep, ...] = field(default=(), metadata=_parses(parse_profile))
    parallel_count: int = field(default=1, metadata=_parses(number(1, 100_000, integer=True)))
    # Processes a sender's or receiver's clients are split over.
    processes: int = field(default=1, metadata=_parses(number(1, 256, integer=True)))
    message_size: MessageSize = field(default=MessageSize(256, 256), metadata=_parses(parse_message_size))
    # A time or a message count.
    duration: Duration = field(default=Duration(seconds=60.0), metadata=_parses(parse_duration))
    warm_up_s: float = field(default=0.0, metadata=_parses(parse_seconds))
    confirm_window: int = field(default=0, metadata=_parses(number(0, 1_000_000, integer=True)))  # 0: the driver's
    processing_delay_ms: float = field(default=0.0, metadata=_parses(number(0)))
    start_jitter_s: float = field(default=0.0, metadata=_parses(parse_seconds))
    # How long the SUT may stay unreachable before the test fails.
    reconnect_budget_s: float = field(default=60.0, metadata=_parses(parse_seconds))
    # Yield-spin to each send time: ~10 us schedule lag, costs CPU.
    precise_timing: bool = field(default=False, metadata=_parses(boolean))
    fail: FailConditions = field(default_factory=FailConditions)
    management_url: str = field(default="", metadata=_parses(text))
    inspector: str = field(default="", metadata=_parses(text))
    inspector_interval_s: float = field(default=10.0, metadata=_parses(number(1)))
    data_server_url: str = field(default="", metadata=_parses(_http_url))
    # How long a peer retries an unreachable data server at collection.
    upload_retry_s: float = field(default=120.0, metadata=_parses(parse_seconds))
    labels: Mapping[str, Any] = field(default_factory=dict, metadata=_parses(_mapping))
    # Request/reply (a closed system, seed 003): senders send requests and wait for replies,
    # receivers answer them.
    request_reply: bool = field(default=False, metadata=_parses(boolean))
    outstanding: int = field(default=1, metadata=_parses(number(1, 10_000, integer=True)))  # requests waited on at once
    think_time: Delay = field(default=Delay(), metadata=_parses(parse_delay))  # from a reply to the next request
    service_time: Delay = field(default=Delay(), metadata=_parses(parse_delay))  # a replier's time over each request
    # A reply later than this counts the request timed out.
    request_timeout_s: float = field(default=5.0, metadata=_parses(parse_seconds))

    __test__ = False  # not a pytest class

    @property
    def duration_s(self) -> float | None:
        return self.duration.seconds

    @property
    def count(self) -> int | None:
        return self.duration.messages

    @classmethod
    def from_parsed(cls, options: Mapping[str, Any]) -> TestOptions:
        """From `parse_options`' output; anything not set keeps its default."""
        given: dict[str, Any] = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        for name in ("send_url", "receive_url", "profile"):
            if name in given:
                given[name] = tuple(given[name])
        given["fail"] = FailConditions.from_options(options)
        return cls(**given)


# name -> parser: the SET options, from the record's fields (the fail conditions' as fail_*).
OPTIONS: dict[str, Callable[[Any], Any]] = {
    **{f.name: f.metadata["parse"] for f in fields(TestOptions) if "parse" in f.metadata},
    **{f"fail_{f.name}": f.metadata["parse"] for f in fields(FailConditions)},
}


# What each driver understands goes in the SUT URL's query string, checked by that driver; a test
# option of the same name would be accepted and then ignored, so it is refused with a pointer.
IN_THE_URL = {
    "durable": "?durable=true",
    "ack_mode": "?ack=manual",
    "qos": "?qos=1",
    "prefetch": "?prefetch=100",
    "queue_arguments": "?queue_type=quorum&max_length=1000",
    "kafka": "?acks=all&linger_ms=5",
}


def parse_options(raw: Mapping[str, Any]) -> dict[str, object]:
    """Parse every option or none: raises OptionError naming the first bad one."""
    parsed: dict[str, object] = {}
    for name in sorted(raw):
        parser = OPTIONS.get(name)
        if name in IN_THE_URL:
            raise OptionError(
                name, f"a driver option: put it in the SUT URL's query string ({IN_THE_URL[name]}; README, SUT URLs)"
            )
        if parser is None:
            raise OptionError(name, f"unknown option (known: {', '.join(sorted(OPTIONS))})")
        try:
            parsed[name] = parser(raw[name])
        except (ValueError, TypeError) as exc:
            raise OptionError(name, str(exc)) from exc
    return parsed

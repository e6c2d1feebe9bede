"""Test options carried by SET: one table of names, each with the parser that checks it.

A SET names options by key; the peer parses every value before storing any, so a bad option
is refused as a whole with a message naming it, before any load starts. Roles add their own
checks on top (a driver knows its URL options).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from protocol.parsing import boolean, choice, number, text
from protocol.sut_url import parse_sut_url

__all__ = [
    "OPTIONS",
    "Delay",
    "Duration",
    "MessageSize",
    "OptionError",
    "ProfileStep",
    "parse_delay",
    "parse_duration",
    "parse_message_size",
    "parse_options",
    "parse_profile",
    "parse_seconds",
]


class OptionError(ValueError):
    """An option's name or value is wrong; the message names it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"option {name!r}: {problem}")
        self.name = name


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


_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TIME_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SIZE = re.compile(r"^(\d+)\s*(b|kb|kib|mb|mib)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000_000, "mib": 1024 * 1024}
MAX_MESSAGE_BYTES = 100 * 1024 * 1024


def parse_seconds(value: Any) -> float:
    """`90`, `1.5`, `"120s"`, `"10m"`, `"1h30m"`, `"250ms"` -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a time such as 120s, 10m or 1h30m")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif text and _TIME_PART.sub("", text) == "":
            seconds = sum(float(n) * _UNITS_S[u] for n, u in _TIME_PART.findall(text))
        else:
            raise ValueError(f"{value!r} is not a time such as 120s, 10m or 1h30m")
    if seconds < 0:
        raise ValueError(f"{value!r} is negative")
    return seconds


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
    urls = [u.strip() for u in value.split(",")] if isinstance(value, str) else value
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
        raise ValueError("expected a URL or a list of URLs")
    for url in urls:
        parse_sut_url(url)  # scheme, host, destination and every query option, or SutUrlError
    return urls


def _http_url(value: Any) -> str:
    url = text(value)
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url


# name -> parser. Names say their unit; see DESIGN.md "Test options".
OPTIONS: dict[str, Callable[[Any], Any]] = {
    "test_id": text,
    "duration": parse_duration,
    "warm_up_s": parse_seconds,
    "rate_per_s": number(0),  # per client; 0 = as fast as the SUT takes it
    "arrivals": choice("uniform", "poisson"),
    "profile": parse_profile,  # rate and clients changing during the run; overrides rate_per_s
    "parallel_count": number(1, 100_000, integer=True),
    "processes": number(1, 256, integer=True),  # processes a sender's or receiver's clients are split over
    "message_size": parse_message_size,
    "send_url": _sut_urls,
    "receive_url": _sut_urls,
    "confirm_window": number(0, 1_000_000, integer=True),
    "processing_delay_ms": number(0),
    "start_jitter_s": parse_seconds,
    "reconnect_budget_s": parse_seconds,  # how long the SUT may stay unreachable before the test fails
    "precise_timing": boolean,  # yield-spin to each send time: ~10 us schedule lag, costs CPU
    "fail_latency_ms": number(0),  # 0 = no latency bound
    "fail_latency_policy": choice("soft", "hard"),
    "fail_latency_percentile": number(0, 100),
    "fail_min_rate_ratio": number(0, 1),
    "fail_max_loss_ratio": number(0, 1),
    "fail_stall_s": parse_seconds,
    "fail_inspector_errors": number(0, 1_000_000, integer=True),  # failed samples in a row; 0: never fail
    "management_url": text,
    "inspector": text,
    "inspector_interval_s": number(1),
    "data_server_url": _http_url,
    "upload_retry_s": parse_seconds,  # how long a peer retries an unreachable data server at collection
    "labels": _mapping,
    # Request/reply (a closed system, seed 003): senders send requests and wait for replies,
    # receivers answer them.
    "request_reply": boolean,
    "outstanding": number(1, 10_000, integer=True),  # requests a client may wait on at once
    "think_time": parse_delay,  # from a reply to the client's next request
    "service_time": parse_delay,  # a replier's time over each request
    "request_timeout_s": parse_seconds,  # a reply later than this counts the request timed out
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


def parse_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Parse every option or none: raises OptionError naming the first bad one."""
    parsed: dict[str, Any] = {}
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

"""The driver contract: connect, publish, receive with a callback, close, and the options it knows.

Sending is pipelined, as OpenMessaging Benchmark's `sendAsync`: `publish` hands one message to
the client library and returns at once; the SUT's verdict (confirm, PUBACK, delivery report,
disposition) comes back later through `on_settled(token, error)` on the event loop. Nothing in a
driver waits for an acknowledgement, so a confirmed send never turns the open model into a
closed loop; the worker bounds what is in flight with a window per client.

Rate, timestamps, sequence numbers and files live above this, in the worker, written once. A
driver translates its client library's errors into the three below, each saying whether a
retry can help; library exceptions never reach the load loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote, urlsplit

from protocol.options import OptionError
from protocol.secrets import redact_text

__all__ = [
    "FIRST_CONNECT_S",
    "ConnectError",
    "DisconnectedError",
    "Driver",
    "DriverError",
    "Endpoint",
    "OnMessages",
    "OnSettled",
    "SendError",
    "backoff_s",
    "boolean",
    "choice",
    "connect_cause",
    "connect_within",
    "integer",
    "number_range",
    "probe",
]

# Called on the event loop with a burst of messages as the library handed them over: each body
# with the wall-clock ns it arrived at, stamped where the library gave it to us (its own thread),
# so the hop to the loop never shows as latency.
OnMessages = Callable[[list[tuple[bytes, int]]], None]
# Called on the event loop once the SUT settled a message: the publish token, and None when it
# took the message or the reason (a SendError naming its kind) when it did not.
OnSettled = Callable[[int, "SendError | None"], None]


class DriverError(Exception):
    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class ConnectError(DriverError):
    pass


class SendError(DriverError):
    """The SUT did not take the message: nacked, returned, unconfirmed, timed out."""

    def __init__(self, message: str, *, retry: bool, kind: str = "failed") -> None:
        super().__init__(message, retry=retry)
        self.kind = kind  # the error counter it goes to: nacked, returned, unconfirmed, timed_out, failed


class DisconnectedError(DriverError):
    pass


# --- option parsers for URL query strings (values arrive as text) ----------------------------------


def integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise ValueError(f"expected a whole number, got {text!r}") from exc
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range ({low} to {high})")
        return value

    return parse


def boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


@dataclass(frozen=True)
class Endpoint:
    """A SUT URL, parsed: `scheme://[user:pw@]host[:port]/destination?option=value&...`."""

    url: str
    scheme: str
    host: str
    port: int
    destination: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        """The URL without its password, for logs and errors."""
        user = f"{self.username}:***@" if self.username else ""
        return f"{self.scheme}://{user}{self.host}:{self.port}/{self.destination}"

    def destination_for(self, client: int) -> str:
        """The destination of client number `client`: `perf-test-%d` with `destinations=1-100`
        spreads clients over perf-test-1 .. perf-test-100 (seed 002's 100 queues)."""
        if "%d" not in self.destination:
            return self.destination
        low, high = self.options.get("destinations", (1, 1))
        return self.destination.replace("%d", str(low + client % (high - low + 1)))

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.options.get("ca"))
        if self.options.get("insecure"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def number_range(text: str) -> tuple[int, int]:
    """`1-100` -> (1, 100): the numbers a `%d` in the destination runs through."""
    low, sep, high = text.partition("-")
    if not sep or not low.isdigit() or not high.isdigit() or int(low) > int(high):
        raise ValueError(f"expected a range such as 1-100, got {text!r}")
    return int(low), int(high)


# Options every driver understands.
_COMMON: dict[str, Callable[[str], Any]] = {"ca": str, "insecure": boolean, "destinations": number_range}


def _unset(token: int, error: SendError | None) -> None:
    raise RuntimeError("a driver settled a message before the worker set on_settled")


class Driver(ABC):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]]  # scheme -> (TLS, default port)
    OPTIONS: ClassVar[dict[str, Callable[[str], Any]]]  # query option -> parser
    DESCRIPTION: ClassVar[str]
    # Messages one client may have handed over and not yet settled, unless the test sets
    # `confirm_window`: each protocol's natural bound (README, SUT URLs).
    DEFAULT_WINDOW: ClassVar[int] = 1000

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        self.endpoint = endpoint
        self.client = client
        self.destination = endpoint.destination_for(client)
        # When the client library reconnected by itself (wall clock, ns), for the report's fault
        # table; drivers whose library says so append here.
        self.reconnects_ns: list[int] = []
        self.on_settled: OnSettled = _unset

    def window(self) -> int:
        """The in-flight bound this driver's options give (the default unless an option sets it)."""
        return self.DEFAULT_WINDOW

    @classmethod
    def parse(cls, url: str, option_name: str = "url") -> Endpoint:
        """Parse and check a URL; raises OptionError naming `option_name` and the fault."""
        parts = urlsplit(url)
        safe = redact_text(url)
        if parts.scheme not in cls.SCHEMES:
            raise OptionError(option_name, f"{safe}: {cls.__name__} takes {', '.join(cls.SCHEMES)}")
        tls, default_port = cls.SCHEMES[parts.scheme]
        try:
            port = parts.port or default_port
        except ValueError as exc:
            raise OptionError(option_name, f"{safe}: {exc}") from exc
        if not parts.hostname:
            raise OptionError(option_name, f"{safe} names no host")
        # One slash separates host and destination; more belong to the destination, as
        # RabbitMQ's AMQP 1.0 addresses need: amqp10://host//queue/q is the address /queue/q.
        destination = unquote(parts.path[1:])
        if not destination:
            raise OptionError(option_name, f"{safe} names no queue, topic or address (the URL path)")
        known = {**_COMMON, **cls.OPTIONS}
        options: dict[str, Any] = {}
        for key, text in parse_qsl(parts.query, keep_blank_values=True):
            parser = known.get(key)
            if parser is None:
                raise OptionError(
                    option_name,
                    f"{safe}: unknown option {key!r} for {parts.scheme}:// (known: {', '.join(sorted(known))})",
                )
            try:
                options[key] = parser(text)
            except ValueError as exc:
                raise OptionError(option_name, f"{safe}: option {key!r}: {exc}") from exc
        return Endpoint(
            url=url,
            scheme=parts.scheme,
            host=parts.hostname,
            port=port,
            destination=destination,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=tls,
            options=options,
        )

    @abstractmethod
    async def connect(self) -> None: ...

    async def start_sending(self) -> None:  # noqa: B027 - most drivers need nothing more
        """Whatever sending needs beyond the connection (an AMQP 1.0 sender link), before the first publish."""

    @abstractmethod
    def publish(self, body: bytes, token: int) -> bool:
        """Hand one message to the client library; never waits for the SUT.

        Returns True when the message is settled already (nothing to confirm: MQTT QoS 0),
        False when `on_settled(token, error)` follows on the event loop (every other case: an
        AMQP 0-9-1 publish without confirms settles once written, Kafka's once reported).
        Raises DisconnectedError when the connection is down now (nothing was sent: the caller
        may hand the same message over again later), and SendError when the library refused it
        outright.
        """

    @abstractmethod
    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        """Start consuming; `on_messages` runs on the event loop for each burst of messages.

        `processing_delay_s`: the consumer takes this long over each message before it takes
        (and acknowledges) the next, as a slow application would."""

    async def pause(self) -> None:
        """Stop taking messages for now, so that a backlog builds in the SUT."""
        raise DriverError(f"{self.DESCRIPTION} receivers cannot pause", retry=False)

    async def resume(self) -> None:
        raise DriverError(f"{self.DESCRIPTION} receivers cannot resume", retry=False)

    @abstractmethod
    async def close(self) -> None: ...


# How long a client tries for its first connection: a SUT that is not there, or refuses us,
# fails the test in seconds. The reconnect budget is for outages after that first connection.
FIRST_CONNECT_S = 3.0

_CAUSES = (
    (
        "authentication failed",
        (
            "authentication failed",
            "access_refused",
            "unauthorized",
            "not authorized",
            "bad user name or password",
            "sasl authentication",
        ),
    ),
    (
        "unknown host",
        (
            "name or service not known",
            "nodename nor servname",
            "temporary failure in name resolution",
            "host resolution failure",
            "no address associated",
        ),
    ),
    ("connection refused", ("connection refused", "connect call failed", "refused to all addresses")),
)


def connect_cause(failure: BaseException | str) -> str:
    """Why a connection failed, in the words a user looks for: "connection refused", "unknown
    host", "authentication failed", "no answer", else what the library said."""
    if isinstance(failure, socket.gaierror):
        return "unknown host"
    if isinstance(failure, ConnectionRefusedError) or getattr(failure, "errno", None) == errno.ECONNREFUSED:
        return "connection refused"
    if isinstance(failure, TimeoutError):
        return "no answer"
    text = str(failure) if not isinstance(failure, str) else failure
    lowered = text.lower()
    for cause, phrases in _CAUSES:
        if any(phrase in lowered for phrase in phrases):
            return cause
    return text or type(failure).__name__


async def probe(endpoint: Endpoint, timeout_s: float = 3.0) -> None:
    """Open and close a TCP connection to the endpoint, so that a wrong host or port is named at
    once (for libraries that would only retry in the background and say nothing)."""
    try:
        connection = await asyncio.wait_for(asyncio.open_connection(endpoint.host, endpoint.port), timeout_s)
    except (OSError, TimeoutError) as exc:
        raise ConnectError(f"{endpoint}: {connect_cause(exc)}", retry=True) from exc
    _, writer = connection
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


# Seconds between tries, growing to the last value and staying there.
RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


def backoff_s(attempt: int) -> float:
    return RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]


async def connect_within(driver: Driver, budget_s: float) -> None:
    """Connect, retrying with backoff while the error says a retry can help and the budget lasts."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            await driver.connect()
            return
        except DriverError as exc:
            if not exc.retry or time.monotonic() > deadline:
                raise
            await asyncio.sleep(backoff_s(attempt))
            attempt += 1

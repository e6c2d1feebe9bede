"""The driver contract: connect, send, receive with a callback, close, and the options it knows.

Rate, timestamps, sequence numbers and files live above this, in the worker, written once. A
driver translates its client library's errors into the three below, each saying whether a
retry can help; library exceptions never reach the load loop.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote, urlsplit

from protocol.options import OptionError

__all__ = [
    "ConnectError",
    "DisconnectedError",
    "Driver",
    "DriverError",
    "Endpoint",
    "OnMessage",
    "SendError",
    "backoff_s",
    "boolean",
    "choice",
    "connect_within",
    "integer",
    "number_range",
]

# Awaited before the message is acknowledged (consumer processing delay, manual ack).
OnMessage = Callable[[bytes], Awaitable[None]]


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


class Driver(ABC):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]]  # scheme -> (TLS, default port)
    OPTIONS: ClassVar[dict[str, Callable[[str], Any]]]  # query option -> parser
    DESCRIPTION: ClassVar[str]

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        self.endpoint = endpoint
        self.client = client
        self.destination = endpoint.destination_for(client)
        # When the client library reconnected by itself (wall clock, ns), for the report's fault
        # table; drivers whose library says so append here.
        self.reconnects_ns: list[int] = []

    @classmethod
    def parse(cls, url: str, option_name: str = "url") -> Endpoint:
        """Parse and check a URL; raises OptionError naming `option_name` and the fault."""
        parts = urlsplit(url)
        safe = url.replace(f":{parts.password}@", ":***@") if parts.password else url
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

    @abstractmethod
    async def send(self, body: bytes) -> None:
        """Return once the SUT took the message (confirmed, when the options ask for confirms)."""

    @abstractmethod
    async def receive(self, on_message: OnMessage) -> None:
        """Start consuming; `on_message` runs on the event loop for each message body."""

    async def pause(self) -> None:
        """Stop taking messages for now, so that a backlog builds in the SUT."""
        raise DriverError(f"{self.DESCRIPTION} receivers cannot pause", retry=False)

    async def resume(self) -> None:
        raise DriverError(f"{self.DESCRIPTION} receivers cannot resume", retry=False)

    @abstractmethod
    async def close(self) -> None: ...


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

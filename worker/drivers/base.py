"""The driver contract: connect, publish, receive with a callback, close, and the options it knows.

Sending is pipelined, as OpenMessaging Benchmark's `sendAsync`: `publish` hands one message to
the client library and returns at once (`publish_many`, a burst of them); the SUT's verdict
(confirm, PUBACK, delivery report, disposition) comes back later through `on_settled(count,
error)` on the event loop. Nothing in a driver waits for an acknowledgement, so a confirmed send
never turns the open model into a closed loop; the worker bounds what is in flight with a window
per client.

Rate, timestamps, sequence numbers and files live above this, in the worker, written once. A
driver translates its client library's errors into the three below, each saying whether a
retry can help; library exceptions never reach the load loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.metadata
import inspect
import socket
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, overload

from protocol.options import OptionError
from protocol.sut_url import Endpoint, SutUrlError, parse_sut_url

__all__ = [
    "FIRST_CONNECT_S",
    "Burst",
    "ConnectError",
    "DisconnectedError",
    "Driver",
    "DriverError",
    "Endpoint",
    "GroupShare",
    "Handover",
    "OnMessages",
    "OnRequests",
    "OnSettled",
    "SendError",
    "backoff_s",
    "connect_cause",
    "connect_within",
    "library_defaults",
    "library_version",
    "probe",
    "retry_within",
    "shown",
]

# Called on the event loop with a burst of messages as the library handed them over: each body
# with the wall-clock ns it arrived at, stamped where the library gave it to us (its own thread),
# so the hop to the loop never shows as latency. An empty burst is news without messages: the
# client is busy (a Kafka rebalance), which a drain must not take for an idle queue.
OnMessages = Callable[[Sequence[tuple[bytes, int]]], None]
# Called on the event loop once the SUT settled messages: how many, and None when it took them or
# the reason (a SendError naming its kind) when it did not. Only the count matters above the
# driver (the window, the error counters), so a library that tells its acknowledgements by
# number (librdkafka's queue length, paho's written QoS 0 messages) settles many in one call.
OnSettled = Callable[[int, "SendError | None"], None]
# A replier's burst: each request's body, its arrival (wall ns), and where its reply goes in the
# driver's own terms (reply-to and correlation), handed back to `Driver.reply` as it came.
OnRequests = Callable[[list[tuple[bytes, int, Any]]], None]


@dataclass(slots=True)
class Burst(Sequence[tuple[bytes, int]]):
    """Messages a library handed over together and stamped once (Kafka's consume), kept as their
    bodies: a (body, stamp) tuple each, which the receiver's column path only takes apart again,
    cost a Kafka receiver 100-200 ns a message of its ~1 µs (bench/HISTORY.md).
    Reads as the pairs it stands for."""

    bodies: list[bytes]
    arrived_ns: int

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> tuple[bytes, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[bytes, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[bytes, int] | list[tuple[bytes, int]]:
        if isinstance(index, slice):
            return [(body, self.arrived_ns) for body in self.bodies[index]]
        return self.bodies[index], self.arrived_ns

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        arrived = self.arrived_ns
        return ((body, arrived) for body in self.bodies)


@dataclass
class Handover:
    """What `publish_many` did with a burst: `handed` messages taken by the library or refused
    outright (their numbers are spent), `refused` of those by error kind (not to be settled),
    and, when it stopped early, the `down` connection: the message after the handed ones, and
    those after it, were not sent."""

    handed: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    down: DisconnectedError | None = None


@dataclass(frozen=True)
class GroupShare:
    """A consumer's part of the consumer group it receives in (Kafka's): the partitions it has
    now, the topic's partition count (None: not known), and whether a rebalance took its
    partitions away and has not yet given it new ones. Shares merge (`merged`); a receiver
    starts once its clients' shares cover the topic with none moving (`covers_topic`)."""

    owned: frozenset[int]
    partitions: int | None
    rebalancing: bool

    @staticmethod
    def merged(shares: Iterable[GroupShare]) -> GroupShare:
        shares = list(shares)
        counts = {share.partitions for share in shares} - {None}
        return GroupShare(
            frozenset().union(*(share.owned for share in shares)),
            counts.pop() if len(counts) == 1 else None,  # two counts: the topic changed under us
            any(share.rebalancing for share in shares),
        )

    def covers_topic(self) -> bool:
        return self.partitions is not None and not self.rebalancing and self.owned == frozenset(range(self.partitions))


def library_defaults(fn: Callable[..., Any], *names: str) -> dict[str, Any]:
    """The defaults `fn` (a library's function or class) declares for the parameters `names`:
    read from the library, so a new version's defaults show as they are."""
    parameters = inspect.signature(fn).parameters
    return {name: parameters[name].default for name in names}


def shown(value: Any) -> str:
    """A setting's value as the report shows it: true/false, none, a number or a name."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(getattr(value, "value", value))  # an enum's value


def library_version(distribution: str) -> str:
    try:
        return f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{distribution} (version unknown)"


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


def _unset(count: int, error: SendError | None) -> None:
    raise RuntimeError("a driver settled a message before the worker set on_settled")


class Driver(ABC):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]]  # scheme -> (TLS, default port)
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]]  # query option -> parser (protocol.sut_url)
    DESCRIPTION: ClassVar[str]
    LIBRARY: ClassVar[str | None] = None  # the client library's distribution, for its version
    # Messages one client may have handed over and not yet settled, unless the test sets
    # `confirm_window`: each protocol's natural bound (README, SUT URLs).
    DEFAULT_WINDOW: ClassVar[int] = 1000
    # Its `publish_many` hands the whole burst to the library in one call, every message at
    # that instant: the sender then builds the burst's bodies at once, with one sent stamp.
    TAKES_BURSTS: ClassVar[bool] = False

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        self.endpoint = endpoint
        self.client = client
        self.destination = endpoint.destination_for(client)
        # When the client library reconnected by itself (wall clock, ns), for the report's fault
        # table; drivers whose library says so append here.
        self.reconnects_ns: list[int] = []
        # Messages the SUT's own numbering shows this consumer never got: a Kafka partition's
        # offsets its fetches passed over. Counted where the library's thread sees them; they
        # are lost like any other, and this says the broker skipped them.
        self.skipped_by_sut = 0
        self.on_settled: OnSettled = _unset

    def settings(self, sending: bool) -> dict[str, str]:
        """The client library and the settings this driver runs it with, for peer.json and the
        report: the URL's options as given, then the library's settings in effect as the library
        names them, its defaults included (`library_settings`), and what is left unlisted said so."""
        out = {"library": library_version(self.LIBRARY)} if self.LIBRARY else {}
        out |= {f"url {key}": str(value) for key, value in sorted(self.endpoint.options.items())}
        out |= {key: shown(value) for key, value in self.library_settings(sending).items()}
        return out | {"everything else": "this driver's defaults (docs/sut-urls.md), then the library's"}

    def library_settings(self, sending: bool) -> dict[str, object]:
        """The settings a sender's (`sending`) or a receiver's client runs with, each named as
        its library names it and prefixed with the library's name, read from what the driver
        hands the library and from the library's own defaults, never copied; no secret."""
        return {}

    def window(self) -> int:
        """The in-flight bound this driver's options give (the default unless an option sets it)."""
        return self.DEFAULT_WINDOW

    def acknowledges(self) -> bool:
        """Whether the SUT acknowledges each message with these options (confirms, PUBACK, a
        delivery report, a disposition): then a settlement without error says the SUT accepted
        it. A driver that settles once written (QoS 0, no confirms) says False, and its senders
        give no accepted count rather than a made-up one."""
        return False

    @classmethod
    def parse(cls, url: str, option_name: str = "url") -> Endpoint:
        """Parse and check a URL (protocol.sut_url); raises OptionError naming `option_name`."""
        try:
            endpoint = parse_sut_url(url)
        except SutUrlError as exc:
            raise OptionError(option_name, str(exc)) from exc
        if endpoint.scheme not in cls.SCHEMES:
            raise OptionError(option_name, f"{endpoint}: {cls.__name__} takes {', '.join(cls.SCHEMES)}")
        return endpoint

    @abstractmethod
    async def connect(self) -> None: ...

    async def start_sending(self) -> None:  # noqa: B027 - most drivers need nothing more
        """Whatever sending needs beyond the connection (an AMQP 1.0 sender link), before the first publish."""

    @abstractmethod
    def publish(self, body: bytes, token: int) -> None:
        """Hand one message to the client library; never waits for the SUT.

        `on_settled` follows on the event loop, never inside this call (an AMQP 0-9-1 publish
        without confirms settles once written, MQTT QoS 0 once paho wrote it, Kafka's once
        reported). `token` is the caller's number for the message. Raises DisconnectedError
        when the connection is down now (nothing was sent: the caller may hand the same message
        over again later), and SendError when the library refused it outright (nothing to
        settle).
        """

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        """`publish` for each of `bodies` in turn, numbered from `first_token`, stopping where the
        connection is down. A driver whose library takes a burst in one call (Kafka's
        `produce_batch`) overrides this: the per-message call is most of a fast library's cost.
        `bodies` is consumed lazily, so each message is built just before it is handed over."""
        done = Handover()
        token = first_token
        publish = self.publish
        for body in bodies:
            try:
                publish(body, token)
            except SendError as exc:  # refused outright: its number is spent all the same
                done.refused[exc.kind] += 1
            except DisconnectedError as exc:
                done.down = exc
                break
            token += 1
        done.handed = token - first_token
        return done

    @abstractmethod
    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        """Start consuming; `on_messages` runs on the event loop for each burst of messages.

        `processing_delay_s`: the consumer takes this long over each message before it takes
        (and acknowledges) the next, as a slow application would."""

    # --- request/reply: drivers that can carry a reply address override these --------------

    def _no_request_reply(self) -> DriverError:
        return DriverError(f"{self.DESCRIPTION}: request/reply is not supported yet", retry=False)

    async def open_replies(self, on_replies: OnMessages) -> None:
        """A requester's: make this client's reply address and consume what arrives there."""
        raise self._no_request_reply()

    def request(self, body: bytes, token: int, correlation: str) -> None:
        """`publish` of a request that names this client's reply address and `correlation`."""
        raise self._no_request_reply()

    async def serve(self, on_requests: OnRequests) -> None:
        """A replier's `receive`: each request comes with the address its reply goes to."""
        raise self._no_request_reply()

    def reply(self, address: Any, body: bytes, token: int) -> None:
        """Publish `body` to a request's reply address with its correlation; it settles through
        `on_settled(count, error)` like a publish."""
        raise self._no_request_reply()

    def group_share(self) -> GroupShare | None:
        """Its consumer group share, for a protocol whose consumers share a topic's partitions
        by a group the broker rebalances; None for the others."""
        return None

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
            "authorization violation",  # NATS
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
    await retry_within(driver.connect, budget_s)


async def retry_within(step: Callable[[], Awaitable[None]], budget_s: float) -> None:
    """Take a step that leaves nothing behind when it fails (a connection, a topic), again with
    backoff while the error says a retry can help and the budget lasts."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            await step()
            return
        except DriverError as exc:
            if not exc.retry or time.monotonic() > deadline:
                raise
            await asyncio.sleep(backoff_s(attempt))
            attempt += 1

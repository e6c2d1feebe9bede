"""A running test's live statistics, typed: what a worker's StatsReport carries about once a
second (`LiveCounters`), and the update a coordinator posts to the data server from them
(`LiveUpdate`: the test, its peers with their latest counters, its points per second and, once
it ended, its outcome and the summary's exact counts). The coordinator writes it
(coordinator/running/live.py) and the data server reads it (reports/live.py, reports/metrics.py)
with these records only; the live page reads its JSON.

`from_json` refuses what is not such a record with a ValueError (the data server answers 400):
a post is checked when it comes, not when /metrics reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from protocol.json_value import JsonObject

__all__ = [
    "BUSY_CPU_PERCENT",
    "BUSY_LOOP_LAG_MS",
    "WORKLOAD_LABELS",
    "FinalCounts",
    "LiveCounters",
    "LivePeer",
    "LivePoint",
    "LiveUpdate",
]

# The workload's parts, each a label of /metrics' maestro_test_info (a fixed set, as Prometheus
# wants a family's labels): what `workload` says in a line, to select and group by.
WORKLOAD_LABELS = (
    "rate_per_client",
    "target_rate",
    "clients",
    "senders",
    "receivers",
    "message_size",
    "length",
    "warm_up",
    "destination",
)

# A sender this busy was the limit itself: its figures describe the load generator, not the SUT.
# The report judges the run's mean CPU and its worst loop lag by them (reports.summary), the
# live page each second's.
BUSY_CPU_PERCENT = 90.0
BUSY_LOOP_LAG_MS = 100.0


# A count or a figure beyond these is no peer's: refused, where it had been taken and then made
# /metrics fail for every test (a float cannot hold a 400-digit count).
_MAX_COUNT = 2**63 - 1
_MAX_FIGURE = 1e18
MAX_PEERS = 20_000  # a live update's; the control-plane bench runs 1,000


def _workload_labels(value: Any) -> dict[str, str]:
    """The known parts, as text of a label's length; none from a coordinator that sent none."""
    if not isinstance(value, Mapping):
        return {}
    return {key: str(value[key])[:200] for key in WORKLOAD_LABELS if isinstance(value.get(key), str | int | float)}


def _int_or_none(value: Any) -> int | None:
    """A count: a whole number from 0, as JSON holds one (not true, 1.7, NaN or a string)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise ValueError(f"a count must be a whole number from 0 to {_MAX_COUNT}, not {value!r:.40}")
    return value


def _mapping_or_none(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"counts by kind must be an object, not {type(value).__name__}")
    return {str(k): count for k, v in value.items() if (count := _int_or_none(v)) is not None}


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"a list was expected, not {type(value).__name__}")
    return value


def _bucket_counts(value: Any) -> tuple[int, ...] | None:
    """Counts at the histogram bucket bounds (a latency's, a response time's), or none."""
    return None if value is None else tuple(_int_or_none(n) or 0 for n in _list(value))


def _text(value: Any, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"a text was expected, not {type(value).__name__}")
    return value


def _float_or_none(value: Any) -> float | None:
    """A figure: a finite number (not true, NaN, Infinity or a string)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not -_MAX_FIGURE <= value <= _MAX_FIGURE:
        raise ValueError(f"a figure must be a finite number within ±{_MAX_FIGURE:g}, not {value!r:.40}")
    return float(value)


@dataclass(frozen=True)
class LiveCounters:
    """A peer's counters as its live statistics carry them, about once a second (a StatsReport's
    `counters`): each role fills its own and leaves the others None, which are not written. They
    are the peer's since its run began, but for the last interval's percentiles."""

    # a sender's and a requester's
    sent: int | None = None
    errors: Mapping[str, int] | None = None  # by kind: nacked, unconfirmed, disconnected…
    in_flight: int | None = None  # a sender's: handed over, not yet settled by the SUT
    lag_p50_us: float | None = None  # how late sends left their schedule, over the last interval
    lag_p99_us: float | None = None
    lag_max_us: float | None = None
    replies: int | None = None  # a requester's
    timed_out: int | None = None
    response_p50_us: float | None = None  # a requester's response time over the last interval
    response_p99_us: float | None = None
    response_le_us: tuple[int, ...] | None = None  # since the run began, as latency_le_us
    response_count: int | None = None
    response_sum_us: int | None = None
    # a receiver's
    received: int | None = None
    foreign: Mapping[str, int] | None = None
    duplicates: int | None = None
    missing: int | None = None  # gaps below the highest sequence number of each sender, so far
    latency_p50_us: float | None = None  # the last interval's, corrected for coordinated omission
    latency_p99_us: float | None = None
    latency_max_us: float | None = None
    latency_le_us: tuple[int, ...] | None = (
        None  # since the run began: at or below each of protocol.hdr.BUCKET_BOUNDS_US
    )
    latency_count: int | None = None
    latency_sum_us: int | None = None
    # the worker's own
    processes: int | None = None  # a run in several processes
    cpu_percent: float | None = None
    loop_lag_ms: float | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        for name in _LIVE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = (
                dict(value) if isinstance(value, Mapping) else list(value) if isinstance(value, tuple) else value
            )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LiveCounters:
        """A ValueError where a counter is not a number (a peer of another version, or a post
        that is no coordinator's)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"live counters must be a JSON object, not {type(data).__name__}")
        try:
            number, count = (lambda n: _float_or_none(data.get(n))), (lambda n: _int_or_none(data.get(n)))
            return cls(
                sent=count("sent"),
                errors=_mapping_or_none(data.get("errors")),
                in_flight=count("in_flight"),
                lag_p50_us=number("lag_p50_us"),
                lag_p99_us=number("lag_p99_us"),
                lag_max_us=number("lag_max_us"),
                replies=count("replies"),
                timed_out=count("timed_out"),
                response_p50_us=number("response_p50_us"),
                response_p99_us=number("response_p99_us"),
                response_le_us=_bucket_counts(data.get("response_le_us")),
                response_count=count("response_count"),
                response_sum_us=count("response_sum_us"),
                received=count("received"),
                foreign=_mapping_or_none(data.get("foreign")),
                duplicates=count("duplicates"),
                missing=count("missing"),
                latency_p50_us=number("latency_p50_us"),
                latency_p99_us=number("latency_p99_us"),
                latency_max_us=number("latency_max_us"),
                latency_le_us=_bucket_counts(data.get("latency_le_us")),
                latency_count=count("latency_count"),
                latency_sum_us=count("latency_sum_us"),
                processes=count("processes"),
                cpu_percent=number("cpu_percent"),
                loop_lag_ms=number("loop_lag_ms"),
            )
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"not live counters ({type(exc).__name__}: {exc})") from exc


_LIVE_FIELDS = tuple(f.name for f in fields(LiveCounters))


@dataclass(frozen=True)
class LivePeer:
    """A peer of the test as the live page lists it: who, in what state, and its latest counters
    (none yet while it starts)."""

    name: str
    role: str
    host: str = ""
    state: str = "starting"  # starting, running, finished, lost
    counters: LiveCounters = LiveCounters()
    elapsed_s: float | None = None  # of its run, when it last reported

    def to_json(self) -> JsonObject:
        out = {"name": self.name, "role": self.role, "host": self.host, "state": self.state} | self.counters.to_json()
        return out | ({} if self.elapsed_s is None else {"elapsed_s": self.elapsed_s})

    def generator_bound(self) -> str | None:
        """Why this sender's last second measured itself rather than the SUT, if it did."""
        c = self.counters
        if self.role != "sender" or self.state != "running" or c.cpu_percent is None:
            return None
        loop = c.loop_lag_ms or 0.0
        if c.cpu_percent < BUSY_CPU_PERCENT and loop < BUSY_LOOP_LAG_MS:
            return None
        return (
            f"sender {self.name} at {c.cpu_percent:.0f} % of a core (event loop {loop:.0f} ms late) in its last "
            "second: the load generator, not the SUT, is the limit now"
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LivePeer:
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise ValueError("a live peer must be an object with its name")
        return cls(
            name=data["name"],
            role=_text(data.get("role"), ""),
            host=_text(data.get("host"), ""),
            state=_text(data.get("state"), "starting"),
            counters=LiveCounters.from_json(data),
            elapsed_s=_float_or_none(data.get("elapsed_s")),
        )


@dataclass(frozen=True)
class LivePoint:
    """One second of the whole test: the rates over it and the worst receiver's latency over
    its last interval (an upper bound of the merged percentile, which only the HDR logs give
    after the test)."""

    elapsed_s: float
    send_rate: float
    receive_rate: float
    latency_p50_us: float | None = None
    latency_p99_us: float | None = None
    # A closed system's: the worst requester's response time over its last interval.
    response_p50_us: float | None = None
    response_p99_us: float | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "elapsed_s": self.elapsed_s,
            "send_rate": self.send_rate,
            "receive_rate": self.receive_rate,
            "latency_p50_us": self.latency_p50_us,
            "latency_p99_us": self.latency_p99_us,
        }
        if self.response_p50_us is not None or self.response_p99_us is not None:
            out |= {"response_p50_us": self.response_p50_us, "response_p99_us": self.response_p99_us}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LivePoint:
        if not isinstance(data, Mapping):
            raise ValueError("a live point must be an object")
        elapsed_s, send_rate, receive_rate = (
            _float_or_none(data.get(k)) for k in ("elapsed_s", "send_rate", "receive_rate")
        )
        if elapsed_s is None or send_rate is None or receive_rate is None:
            raise ValueError("a live point needs its elapsed_s, send_rate and receive_rate")
        return cls(
            elapsed_s,
            send_rate,
            receive_rate,
            _float_or_none(data.get("latency_p50_us")),
            _float_or_none(data.get("latency_p99_us")),
            _float_or_none(data.get("response_p50_us")),
            _float_or_none(data.get("response_p99_us")),
        )


@dataclass(frozen=True)
class FinalCounts:
    """The summary's exact counts, sent with the last update, so that the counters a scraper
    last sees equal summary.json's; none where the test has no figures."""

    sent: int | None = None
    received: int | None = None
    lost: int | None = None
    duplicates: int | None = None
    peers: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # by name: sent or received

    def to_json(self) -> JsonObject:
        counts = {k: v for k in ("sent", "received", "lost", "duplicates") if (v := getattr(self, k)) is not None}
        return counts | {"peers": {name: dict(c) for name, c in self.peers.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinalCounts:
        if not isinstance(data, Mapping) or not isinstance(data.get("peers", {}), Mapping):
            raise ValueError("the final counts must be an object with the peers' by name")
        return cls(
            sent=_int_or_none(data.get("sent")),
            received=_int_or_none(data.get("received")),
            lost=_int_or_none(data.get("lost")),
            duplicates=_int_or_none(data.get("duplicates")),
            peers={str(name): _mapping_or_none(c) or {} for name, c in data.get("peers", {}).items()},
        )


@dataclass(frozen=True)
class LiveUpdate:
    """What a coordinator posts about once a second while its test runs; the last one, once it
    ended, has its outcome, reason and final counts, and the state "finished"."""

    test_id: str
    name: str = ""
    kind: str = ""
    workload: str = ""  # the test as it runs, in a line (coordinator.definitions.workload)
    workload_labels: Mapping[str, str] = field(default_factory=dict)  # its parts: WORKLOAD_LABELS
    target_rate: float = 0.0  # msg/s in all; 0: unbounded, or a closed system
    size_bytes: float = 0.0  # a message's mean, for MB/s beside msg/s
    started_s: float = 0.0  # wall clock
    elapsed_s: float = 0.0
    expected_s: float | None = None
    state: str = "running"  # running, finished
    peers: tuple[LivePeer, ...] = ()
    points: tuple[LivePoint, ...] = ()  # the seconds not posted before
    outcome: str | None = None
    reason: str | None = None
    summary: FinalCounts | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "test_id": self.test_id,
            "name": self.name,
            "kind": self.kind,
            "workload": self.workload,
            "workload_labels": dict(self.workload_labels),
            "target_rate": self.target_rate,
            "size_bytes": self.size_bytes,
            "started_s": self.started_s,
            "elapsed_s": self.elapsed_s,
            "expected_s": self.expected_s,
            "state": self.state,
            "peers": [peer.to_json() for peer in self.peers],
            "points": [point.to_json() for point in self.points],
        }
        if self.state == "finished":
            out |= {"outcome": self.outcome, "reason": self.reason}
            out["summary"] = None if self.summary is None else self.summary.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LiveUpdate:
        """The update a post carries; a ValueError saying what is wrong with it."""
        if not isinstance(data, Mapping) or not isinstance(data.get("test_id"), str):
            raise ValueError('a live update must be an object with its "test_id"')
        peers, points = data.get("peers", []), data.get("points", [])
        if not isinstance(peers, list) or not isinstance(points, list):
            raise ValueError("peers and points must be lists")
        if len(peers) > MAX_PEERS:
            raise ValueError(f"{len(peers):,} peers: a live update holds at most {MAX_PEERS:,}")
        names = [peer.get("name") if isinstance(peer, Mapping) else None for peer in peers]
        if len(set(names)) < len(names):
            raise ValueError("two peers of one name")
        summary = data.get("summary")
        try:
            return cls(
                test_id=data["test_id"],
                name=str(data.get("name") or ""),
                kind=str(data.get("kind") or ""),
                workload=str(data.get("workload") or ""),
                workload_labels=_workload_labels(data.get("workload_labels")),
                target_rate=_float_or_none(data.get("target_rate")) or 0.0,
                size_bytes=_float_or_none(data.get("size_bytes")) or 0.0,
                started_s=_float_or_none(data.get("started_s")) or 0.0,
                elapsed_s=_float_or_none(data.get("elapsed_s")) or 0.0,
                expected_s=_float_or_none(data.get("expected_s")),
                state=_text(data.get("state"), "running"),
                peers=tuple(LivePeer.from_json(peer) for peer in peers),
                points=tuple(LivePoint.from_json(point) for point in points),
                outcome=None if data.get("outcome") is None else str(data["outcome"]),
                reason=None if data.get("reason") is None else str(data["reason"]),
                summary=None if summary is None else FinalCounts.from_json(summary),
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a live update ({type(exc).__name__}: {exc})") from exc

"""What test.json is, typed: the coordinator's record of a test (a phase, or a series of phases),
its peers with their clocks, a series' rows, the control broker's outages. As `protocol.figures`
is the figures', this is the one code that turns test.json into JSON and back: the coordinator
builds a `TestRecord`, the result store writes `to_text()`, and the reports read fields.

`to_json` writes the JSON as the coordinator wrote it before these records, key for key: golden
files of real runs pin it (tests/unit/protocol/test_test_record.py). A key that one kind of record
lacks (a phase's `target_rate`, a series' `steps`, an opening record's `summary`) is a field that
is None, and is not written. Three keys are written as null in some records and left out in others
(`ended`, `failed_at`, `stopped_by`; a clock's `before` and `after`): those take `UNSET` where the
key is left out, so a record reads back as it was written. `from_json` gives a key an older record
lacks its default, so the results of earlier versions still read.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from protocol.figures import Percentiles, TestFigures, TimeFigures
from protocol.json_value import JsonObject, JsonValue
from protocol.secrets import redact

__all__ = [
    "UNSET",
    "ClockEstimate",
    "ClockSampleRow",
    "Estimate",
    "Outage",
    "PeerClock",
    "PeerEntry",
    "PhaseRow",
    "ReplyRow",
    "TestRecord",
    "Unset",
]


class Unset(enum.Enum):
    """A key the record leaves out (where null would say something else: "not yet", "none")."""

    UNSET = "unset"


UNSET: Literal[Unset.UNSET] = Unset.UNSET


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _maybe(data: Mapping[str, Any], key: str) -> Any:
    """The value of `key`, or UNSET where the record has no such key."""
    return data.get(key, UNSET)


def _put(out: JsonObject, key: str, value: JsonValue) -> None:
    """Write `key` unless its value is None (a key this record has not)."""
    if value is not None:
        out[key] = value


@dataclass(frozen=True)
class ClockEstimate:
    """A peer's clock against the coordinator's from one exchange (before or after the load)."""

    offset_us: float = 0.0
    uncertainty_us: float = 0.0
    rtt_us: float = 0.0
    path: str = ""  # udp: measured directly; mqtt: through the control broker

    def to_json(self) -> JsonObject:
        return {
            "offset_us": self.offset_us,
            "uncertainty_us": self.uncertainty_us,
            "rtt_us": self.rtt_us,
            "path": self.path,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClockEstimate:
        return cls(
            offset_us=float(data.get("offset_us", 0.0)),
            uncertainty_us=float(data.get("uncertainty_us", 0.0)),
            rtt_us=float(data.get("rtt_us", 0.0)),
            path=str(data.get("path", "")),
        )


@dataclass(frozen=True)
class ClockSampleRow:
    """One clock sample as protocol.clock_correction fits it: [when µs, offset µs, ± µs, path]
    (a record from before paths were kept has three)."""

    at_us: int
    offset_us: float
    uncertainty_us: float
    path: str | None = None

    def to_json(self) -> list[JsonValue]:
        row: list[JsonValue] = [self.at_us, self.offset_us, self.uncertainty_us]
        return row if self.path is None else [*row, self.path]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> ClockSampleRow:
        at, offset, uncertainty, *rest = data
        return cls(int(at), float(offset), float(uncertainty), str(rest[0]) if rest else None)


def _estimate_or_unset(value: Any) -> ClockEstimate | Unset | None:
    if value is UNSET or value is None:
        return value
    return ClockEstimate.from_json(value)


@dataclass(frozen=True)
class PeerClock:
    """A peer's clock as the coordinator measured it: every sample, and the exchanges before
    and after the load (None: measured, but no answer; UNSET: not measured). `samples` None: the
    peer's clock was never measured (the record then writes `{}`)."""

    samples: tuple[ClockSampleRow, ...] | None = None
    path: str | None = None  # the best path any sample took (udp where one did)
    before: ClockEstimate | Unset | None = UNSET
    after: ClockEstimate | Unset | None = UNSET

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        if self.samples is not None:
            out["samples"] = [row.to_json() for row in self.samples]
        for key, value in (("before", self.before), ("after", self.after)):
            if value is not UNSET:
                out[key] = None if value is None else value.to_json()
        _put(out, "path", self.path)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> PeerClock:
        data = data or {}
        samples = data.get("samples")
        return cls(
            samples=None if samples is None else tuple(ClockSampleRow.from_json(row) for row in samples),
            path=_str_or_none(data.get("path")),
            before=_estimate_or_unset(_maybe(data, "before")),
            after=_estimate_or_unset(_maybe(data, "after")),
        )

    def estimate(self, when: Literal["before", "after"]) -> ClockEstimate | None:
        """The exchange `when`, where there was one that answered."""
        value = self.before if when == "before" else self.after
        return None if value is UNSET else value


@dataclass(frozen=True)
class PeerEntry:
    """A peer of the test as test.json lists it. `lost`: whether it was lost by the end (None in
    an opening record, which the test has not ended)."""

    name: str
    host: str = ""
    role: str = ""
    peer_id: str = ""
    version: str = ""
    clock: PeerClock = PeerClock()
    lost: bool | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "name": self.name,
            "host": self.host,
            "role": self.role,
            "peer_id": self.peer_id,
            "version": self.version,
            "clock": self.clock.to_json(),
        }
        _put(out, "lost", self.lost)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PeerEntry:
        lost = data.get("lost")
        return cls(
            name=str(data.get("name", "")),
            host=str(data.get("host") or ""),
            role=str(data.get("role", "")),
            peer_id=str(data.get("peer_id", "")),
            version=str(data.get("version", "")),
            clock=PeerClock.from_json(data.get("clock")),
            lost=None if lost is None else bool(lost),
        )


@dataclass(frozen=True)
class Outage:
    """The coordinator's control broker lost and back (ISO times; back None while down)."""

    lost: str
    back: str | None = None
    seconds: float | None = None

    def to_json(self) -> JsonObject:
        return {"lost": self.lost, "back": self.back, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outage:
        seconds = data.get("seconds")
        return cls(
            str(data.get("lost", "")), _str_or_none(data.get("back")), None if seconds is None else float(seconds)
        )


@dataclass(frozen=True)
class ReplyRow:
    """A request/reply phase's closed-system figures in its series' row."""

    throughput_per_s: float = 0.0
    response_time_us: TimeFigures = field(default_factory=TimeFigures)
    timed_out: int = 0


@dataclass(frozen=True)
class PhaseRow:
    """One phase in its series' test.json (`steps`, `curve`, `max_sustainable`, `best`, and a
    sweep's `comparison` with its `point`). The figures are None where the phase has none;
    `latency_us` is None too where its latency is no figure."""

    test_id: str
    rate_per_client: float | None = None
    parallel: int | None = None
    target_rate: float | None = None
    outcome: str | None = None
    reason: str | None = None
    send_rate: float | None = None
    receive_rate: float | None = None
    latency_us: Percentiles | None = None
    lost: int | None = None
    reply: ReplyRow | None = None
    point: Mapping[str, Any] | None = None  # a sweep's: the values it set

    def to_json(self) -> JsonObject:
        out: JsonObject = {} if self.point is None else {"point": dict(self.point)}
        out |= {
            "test_id": self.test_id,
            "rate_per_client": self.rate_per_client,
            "parallel": self.parallel,
            "target_rate": self.target_rate,
            "outcome": self.outcome,
            "reason": self.reason,
            "send_rate": self.send_rate,
            "receive_rate": self.receive_rate,
            "latency_us": None if self.latency_us is None else self.latency_us.to_json(),
            "lost": self.lost,
        }
        if (rr := self.reply) is not None:
            out |= {
                "throughput_per_s": rr.throughput_per_s,
                "response_time_us": rr.response_time_us.to_json(),
                "timed_out": rr.timed_out,
            }
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseRow:
        latency, lost, point = data.get("latency_us"), data.get("lost"), data.get("point")
        reply = None
        if "throughput_per_s" in data or "response_time_us" in data:
            reply = ReplyRow(
                float(data.get("throughput_per_s") or 0.0),
                TimeFigures.from_json(data.get("response_time_us")),
                int(data.get("timed_out") or 0),
            )
        return cls(
            test_id=str(data.get("test_id", "")),
            rate_per_client=data.get("rate_per_client"),
            parallel=data.get("parallel"),
            target_rate=data.get("target_rate"),
            outcome=_str_or_none(data.get("outcome")),
            reason=_str_or_none(data.get("reason")),
            send_rate=data.get("send_rate"),
            receive_rate=data.get("receive_rate"),
            latency_us=None if not isinstance(latency, Mapping) else Percentiles.from_json(latency),
            lost=None if lost is None else int(lost),
            reply=reply,
            point=None if point is None else dict(point),
        )


@dataclass(frozen=True)
class Estimate:
    """A repeated test's figure over its passing repetitions: mean, deviation and 95 % interval."""

    n: int
    mean: float
    stdev: float
    ci95: tuple[float, float]

    def to_json(self) -> JsonObject:
        return {"n": self.n, "mean": self.mean, "stdev": self.stdev, "ci95": list(self.ci95)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Estimate:
        low, high = data.get("ci95") or (0.0, 0.0)
        return cls(int(data.get("n", 0)), data.get("mean", 0.0), data.get("stdev", 0.0), (low, high))


@dataclass(frozen=True)
class TestRecord:
    """test.json: what ran (`definition`, as coordinator.definitions stores it; `workload`, as
    the console says it) and how it ended (no `outcome` while it runs). A phase (a test of one
    load) has `target_rate`, `peers`, `testbed` and, once ended, its `summary` and what happened
    (`collection`, `events`, `notes`, `control_outages`); a series (incremental, search, repeated,
    sweep) has its phases' rows (`steps`; a search's `curve`; `max_sustainable` or a sweep's
    `best`) and what it adds up to (`stopped_by`, `statistics`, `comparison`)."""

    test_id: str
    name: str = ""
    kind: str = ""
    definition: Mapping[str, Any] = field(default_factory=dict)
    workload: str = ""
    target_rate: float | None = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    outcome: str | None = None
    reason: str | None = None
    started: str | None = None
    ended: str | Unset | None = UNSET  # None: a series' opening record (it has not ended)
    failed_at: str | Unset | None = UNSET  # a phase's closing record: when it failed, or None
    peers: tuple[PeerEntry, ...] | None = None
    testbed: Mapping[str, Any] | None = None  # protocol.testbed's record
    collection: Mapping[str, str] | None = None  # peer label -> what its collection did
    events: tuple[Mapping[str, Any], ...] | None = None  # the agents' reports (coordinator.running.actions)
    notes: tuple[str, ...] | None = None
    control_outages: tuple[Outage, ...] | None = None
    summary: TestFigures | None = None
    phase_of: str | None = None  # the series' test id, for one of its phases
    # A repeated test's phase: its number. Each repetition is a run of the same workload, a
    # point of the test's history (a sweep's or a search's step is not).
    repetition: int | None = None
    stopped_by: str | Unset | None = UNSET  # an incremental test's or a search's: why it stopped
    statistics: Mapping[str, Estimate] | None = None  # a repeated test's
    comparison: tuple[PhaseRow, ...] | None = None  # a sweep's rows, with their points
    steps: tuple[PhaseRow, ...] | None = None
    curve: tuple[PhaseRow, ...] | None = None  # a search's steps in order of load
    max_sustainable: PhaseRow | None = None
    best: PhaseRow | None = None

    __test__ = False  # not a pytest class

    @property
    def end(self) -> str | None:
        """When it ended, where it did."""
        return None if self.ended is UNSET else self.ended

    @property
    def message_size(self) -> object:
        """The definition's message size as it was given (bytes, "1KiB", a range), a series' from
        the test it repeats or steps through; None where it has none."""
        size = self.definition.get("size")
        base = self.definition.get("base")
        return base.get("size") if size is None and isinstance(base, Mapping) else size

    def noted(self, note: str) -> TestRecord:
        """The record with one more note."""
        return replace(self, notes=(*(self.notes or ()), note))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "test_id": self.test_id,
            "name": self.name,
            "kind": self.kind,
            "definition": dict(self.definition),
            "workload": self.workload,
        }
        _put(out, "target_rate", self.target_rate)
        out |= {"labels": dict(self.labels), "outcome": self.outcome, "reason": self.reason}
        _put(out, "started", self.started)
        for key, value in (("ended", self.ended), ("failed_at", self.failed_at)):
            if value is not UNSET:
                out[key] = value
        _put(out, "peers", None if self.peers is None else [p.to_json() for p in self.peers])
        _put(out, "testbed", None if self.testbed is None else dict(self.testbed))
        _put(out, "collection", None if self.collection is None else dict(self.collection))
        _put(out, "events", None if self.events is None else [dict(e) for e in self.events])
        _put(out, "notes", None if self.notes is None else list(self.notes))
        _put(out, "control_outages", _rows(self.control_outages))
        _put(out, "summary", None if self.summary is None else self.summary.to_json())
        _put(out, "phase_of", self.phase_of)
        _put(out, "repetition", self.repetition)
        if self.stopped_by is not UNSET:
            out["stopped_by"] = self.stopped_by
        if self.statistics is not None:
            out["statistics"] = {name: e.to_json() for name, e in self.statistics.items()}
        _put(out, "comparison", _rows(self.comparison))
        _put(out, "steps", _rows(self.steps))
        _put(out, "curve", _rows(self.curve))
        _put(out, "max_sustainable", None if self.max_sustainable is None else self.max_sustainable.to_json())
        _put(out, "best", None if self.best is None else self.best.to_json())
        return out

    def to_text(self) -> str:
        """test.json's text: no URL password from any definition or note reaches it (the data
        server publishes it over HTTP)."""
        return json.dumps(redact(self.to_json()), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestRecord:
        """A record as `to_json` wrote it, or as an earlier version did (a key it lacks takes its
        default); a ValueError where `data` is not a test's record at all."""
        if not isinstance(data, Mapping):
            raise ValueError(f"test.json must be a JSON object, not {type(data).__name__}")
        try:
            return cls._from_json(data)
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a test's record ({type(exc).__name__}: {exc})") from exc

    @classmethod
    def _from_json(cls, data: Mapping[str, Any]) -> TestRecord:
        peers, summary, statistics = data.get("peers"), data.get("summary"), data.get("statistics")
        target_rate, testbed, collection = data.get("target_rate"), data.get("testbed"), data.get("collection")
        events, notes = data.get("events"), data.get("notes")
        return cls(
            test_id=str(data.get("test_id", "")),
            name=str(data.get("name") or ""),
            kind=str(data.get("kind") or ""),
            definition=dict(data.get("definition") or {}),
            workload=str(data.get("workload") or ""),
            target_rate=target_rate,
            labels=dict(data.get("labels") or {}),
            outcome=_str_or_none(data.get("outcome")),
            reason=_str_or_none(data.get("reason")),
            started=_str_or_none(data.get("started")),
            ended=_maybe(data, "ended"),
            failed_at=_maybe(data, "failed_at"),
            peers=None if peers is None else tuple(PeerEntry.from_json(p) for p in peers),
            testbed=None if testbed is None else dict(testbed),
            collection=None if collection is None else {str(k): str(v) for k, v in collection.items()},
            events=None if events is None else tuple(dict(e) for e in events),
            notes=None if notes is None else tuple(str(n) for n in notes),
            control_outages=_read_rows(data.get("control_outages"), Outage.from_json),
            summary=None if summary is None else TestFigures.from_json(summary),
            phase_of=_str_or_none(data.get("phase_of")),
            repetition=_int_or_none(data.get("repetition")),
            stopped_by=_maybe(data, "stopped_by"),
            statistics=None if statistics is None else {k: Estimate.from_json(v) for k, v in statistics.items()},
            comparison=_read_rows(data.get("comparison"), PhaseRow.from_json),
            steps=_read_rows(data.get("steps"), PhaseRow.from_json),
            curve=_read_rows(data.get("curve"), PhaseRow.from_json),
            max_sustainable=_read_row(data.get("max_sustainable")),
            best=_read_row(data.get("best")),
        )

    @classmethod
    def from_text(cls, text: str | bytes) -> TestRecord:
        """test.json's text read; a ValueError where it is no JSON or no test's record."""
        return cls.from_json(json.loads(text))


_Row = TypeVar("_Row", Outage, PhaseRow)


def _rows(rows: Sequence[Outage | PhaseRow] | None) -> list[JsonObject] | None:
    return None if rows is None else [row.to_json() for row in rows]


def _read_rows(
    rows: Sequence[Mapping[str, Any]] | None, read: Callable[[Mapping[str, Any]], _Row]
) -> tuple[_Row, ...] | None:
    return None if rows is None else tuple(read(row) for row in rows)


def _read_row(row: Mapping[str, Any] | None) -> PhaseRow | None:
    return None if not row else PhaseRow.from_json(row)

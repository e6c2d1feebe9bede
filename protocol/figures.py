"""What a test's figures are, typed: the record `reports.summary` makes of a test folder, that
the data server answers, test.json keeps as `summary`, and summary.json projects to DESIGN.md's
keys. As `protocol.results` is a peer's files', this is the one code that turns these figures
into JSON and back; the coordinator and the reports read fields, never keys.

`to_json` writes the JSON as it was before these records, key for key and in the same order:
golden files pin it (tests/unit/protocol/test_figures.py). `from_json` gives a key an older
record lacks its default, so the results of earlier versions still read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from protocol.atomic import write_text_atomically
from protocol.json_value import JsonObject

__all__ = [
    "SUMMARY_KEYS",
    "Accounting",
    "AccountingRow",
    "AddressCounters",
    "LittlesLaw",
    "PartitionCounts",
    "PeerFigures",
    "Percentiles",
    "QueueCounters",
    "Rate",
    "RequestReplyFigures",
    "SenderFigures",
    "SutCounters",
    "TestFigures",
    "TimeFigures",
    "TopicCounters",
    "read_summary_json",
    "sut_counters_from_json",
    "write_summary_json",
]

# The keys of summary.json: DESIGN.md's, which tools outside the code rely on, and the two on
# latency's trust.
SUMMARY_KEYS = (
    "test_id",
    "outcome",
    "reason",
    "duration_s",
    "sent",
    "received",
    "lost",
    "duplicates",
    "send_rate",
    "receive_rate",
    "latency_us",  # null where `latency_untrusted` says why there is no figure
    "latency_uncertainty_us",  # ± on the latency figures where they cross hosts (0: one clock)
    "latency_untrusted",  # why the latency figures are no figures (a clamped sample, a clock step…), or null
    "accounting",  # intended / sent / accepted / received, in total and per sender (reports.accounting)
    "peers",
)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class Rate:
    """Messages per whole second: their mean, and the least and most of any second."""

    mean: float = 0.0
    min: float = 0.0
    max: float = 0.0

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "min": self.min, "max": self.max}

    def of(self, count: int) -> float | None:
        """The mean, for `count` messages in all: None where some went but none after the
        warm-up (a run stopped that early has no window to measure, not a rate of 0: "send rate
        0.0 msg/s" stood beside 4,609 sent). Any message after the warm-up makes the mean positive."""
        return None if count and not self.mean else self.mean

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Rate:
        data = data or {}
        return cls(float(data.get("mean", 0.0)), float(data.get("min", 0.0)), float(data.get("max", 0.0)))


@dataclass(frozen=True)
class Percentiles:
    """A latency's percentiles in µs, from merged HDR histograms."""

    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    max: float = 0.0

    def items(self) -> tuple[tuple[str, float], ...]:
        """Each percentile's key and figure, in summary.json's order."""
        return ("p50", self.p50), ("p90", self.p90), ("p99", self.p99), ("p999", self.p999), ("max", self.max)

    def to_json(self) -> JsonObject:
        return dict(self.items())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Percentiles:
        return cls(*(float(data.get(name, 0.0)) for name in ("p50", "p90", "p99", "p999", "max")))


@dataclass(frozen=True)
class TimeFigures:
    """A request/reply time's figures in µs: percentiles, mean and how many samples."""

    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    mean: float = 0.0
    max: float = 0.0
    samples: int = 0

    def to_json(self) -> JsonObject:
        return {
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "p999": self.p999,
            "mean": self.mean,
            "max": self.max,
            "samples": self.samples,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TimeFigures:
        data = data or {}
        p50, p90, p99, p999, mean, most = (
            float(data.get(n, 0.0)) for n in ("p50", "p90", "p99", "p999", "mean", "max")
        )
        return cls(p50, p90, p99, p999, mean, most, int(data.get("samples", 0)))


@dataclass(frozen=True)
class LittlesLaw:
    """What is waiting or thinking against throughput x the time each spends at it."""

    clients: float = 0.0
    throughput_x_time: float = 0.0
    deviation_percent: float = 0.0

    def to_json(self) -> JsonObject:
        return {
            "clients": self.clients,
            "throughput_x_time": self.throughput_x_time,
            "deviation_percent": self.deviation_percent,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> LittlesLaw:
        data = data or {}
        return cls(*(float(data.get(n, 0.0)) for n in ("clients", "throughput_x_time", "deviation_percent")))


_TIMES = ("response_time_us", "replier_us", "request_leg_us", "reply_leg_us")


@dataclass(frozen=True)
class RequestReplyFigures:
    """A closed system's figures, merged over its requesters (reports.summary)."""

    replies: int = 0
    timed_out: int = 0
    late: int = 0
    duplicates: int = 0
    skipped_by_sut: int = 0
    requests: int = 0
    foreign: Mapping[str, int] = field(default_factory=dict)
    throughput_per_s: float = 0.0
    legs_uncertainty_us: float = 0.0  # ± on the request and reply legs: 0 where the clocks are one
    think_time_mean_s: float = 0.0
    think_time_measured_s: float = 0.0
    response_time_us: TimeFigures = TimeFigures()
    replier_us: TimeFigures = TimeFigures()
    request_leg_us: TimeFigures = TimeFigures()
    reply_leg_us: TimeFigures = TimeFigures()
    hints: tuple[str, ...] = ()
    littles_law: LittlesLaw = LittlesLaw()

    def to_json(self) -> JsonObject:
        return {
            "replies": self.replies,
            "timed_out": self.timed_out,
            "late": self.late,
            "duplicates": self.duplicates,
            "skipped_by_sut": self.skipped_by_sut,
            "requests": self.requests,
            "foreign": dict(self.foreign),
            "throughput_per_s": self.throughput_per_s,
            "legs_uncertainty_us": self.legs_uncertainty_us,
            "think_time_mean_s": self.think_time_mean_s,
            "think_time_measured_s": self.think_time_measured_s,
            **{name: getattr(self, name).to_json() for name in _TIMES},
            "hints": list(self.hints),
            "littles_law": self.littles_law.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestReplyFigures:
        return cls(
            replies=int(data.get("replies", 0)),
            timed_out=int(data.get("timed_out", 0)),
            late=int(data.get("late", 0)),
            duplicates=int(data.get("duplicates", 0)),
            skipped_by_sut=int(data.get("skipped_by_sut", 0)),
            requests=int(data.get("requests", 0)),
            foreign={str(k): int(v) for k, v in (data.get("foreign") or {}).items()},
            throughput_per_s=float(data.get("throughput_per_s", 0.0)),
            legs_uncertainty_us=float(data.get("legs_uncertainty_us", 0.0)),
            think_time_mean_s=float(data.get("think_time_mean_s", 0.0)),
            think_time_measured_s=float(data.get("think_time_measured_s", 0.0)),
            response_time_us=TimeFigures.from_json(data.get("response_time_us")),
            replier_us=TimeFigures.from_json(data.get("replier_us")),
            request_leg_us=TimeFigures.from_json(data.get("request_leg_us")),
            reply_leg_us=TimeFigures.from_json(data.get("reply_leg_us")),
            hints=tuple(data.get("hints", ())),
            littles_law=LittlesLaw.from_json(data.get("littles_law")),
        )


@dataclass(frozen=True)
class SenderFigures:
    """One sender's stream, as the loss table shows it: `expected` is what it sent."""

    sender: str
    key: str
    sut: str | None = None
    intended: int | None = None  # what its schedule meant to send (None: a peer of before)
    expected: int = 0
    accepted: int | None = None  # what the SUT acknowledged (None: its settings acknowledge nothing)
    received: int = 0
    lost: int = 0
    lost_percent: float = 0.0
    duplicates: int = 0
    out_of_order: int = 0

    def to_json(self) -> JsonObject:
        return {
            "sender": self.sender,
            "key": self.key,
            "sut": self.sut,
            "intended": self.intended,
            "expected": self.expected,
            "accepted": self.accepted,
            "received": self.received,
            "lost": self.lost,
            "lost_percent": self.lost_percent,
            "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SenderFigures:
        return cls(
            sender=str(data["sender"]),
            key=str(data.get("key", data["sender"])),
            sut=data.get("sut"),
            intended=_int_or_none(data.get("intended")),
            expected=int(data.get("expected", 0)),
            accepted=_int_or_none(data.get("accepted")),
            received=int(data.get("received", 0)),
            lost=int(data.get("lost", 0)),
            lost_percent=float(data.get("lost_percent", 0.0)),
            duplicates=int(data.get("duplicates", 0)),
            out_of_order=int(data.get("out_of_order", 0)),
        )


@dataclass(frozen=True)
class AccountingRow:
    """The three counts of one sender (reports.accounting), with `sent` between the first two."""

    sender: str
    sut: str | None = None
    queue: str | None = None  # the AMQP 0-9-1 queue it published to, whose counters are the SUT's
    topic: str | None = None  # the Kafka topic it produced to
    guarantee: str = "at-most-once"  # at-least-once where the SUT acknowledged
    intended: int | None = None
    sent: int = 0
    accepted: int | None = None
    received: int = 0

    def to_json(self) -> JsonObject:
        return {
            "sender": self.sender,
            "sut": self.sut,
            "queue": self.queue,
            "topic": self.topic,
            "guarantee": self.guarantee,
            "intended": self.intended,
            "sent": self.sent,
            "accepted": self.accepted,
            "received": self.received,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AccountingRow:
        return cls(
            sender=str(data["sender"]),
            sut=data.get("sut"),
            queue=data.get("queue"),
            topic=data.get("topic"),
            guarantee=str(data.get("guarantee", "at-most-once")),
            intended=_int_or_none(data.get("intended")),
            sent=int(data.get("sent", 0)),
            accepted=_int_or_none(data.get("accepted")),
            received=int(data.get("received", 0)),
        )


def _counts_json(record: SutCounters, source: str) -> JsonObject:
    """A SUT counters record as summary.json has it: `source` first, then its fields in order
    (`since` written as "from"), `caught_up` last. The keys a record read from an older file
    lacked (`absent`: a queue's `from` and `left_before` came later) stay out, so its figures are
    written again as they were, and a missing first reading is not claimed to be none."""
    out: JsonObject = {"source": source}
    for f in fields(record):
        key = "from" if f.name == "since" else f.name
        if f.name == "absent" or key in record.absent:
            continue
        value = getattr(record, f.name)
        out[key] = [v.to_json() for v in value] if isinstance(value, tuple) else value
    return out


def _counts_of(cls: _CountsClass, data: Mapping[str, Any]) -> SutCounters:
    """The record `cls` from its JSON; a key an older record lacks keeps its default."""
    given: dict[str, Any] = {}
    absent = set()
    for f in fields(cls):
        key = "from" if f.name == "since" else f.name
        if key in data:
            given[f.name] = data[key]
        elif f.name != "absent":
            absent.add(key)
    given["absent"] = frozenset(absent)
    if "per_partition" in given:
        given["per_partition"] = tuple(PartitionCounts(**p) for p in given["per_partition"])
    return cls(**given)


@dataclass(frozen=True)
class QueueCounters:
    """A RabbitMQ queue's own counts over the test, as an inspector read them (reports.accounting):
    taken in, delivered for the first time, held before and after, and dropped undelivered."""

    vhost: str = ""
    queue: str = ""
    since: str | None = None  # the first reading's time; None for a queue the test made
    at: str = ""  # the last reading's
    published: int = 0
    delivered: int = 0
    left_before: int = 0
    left: int = 0
    dropped: int = 0
    caught_up: bool = False  # the reading had counted all our senders sent and receivers got
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # see _counts_json

    def to_json(self) -> JsonObject:
        return _counts_json(self, "rabbitmq")


@dataclass(frozen=True)
class PartitionCounts:
    """One Kafka partition's share of a topic's counts: offsets from `high_before` to `high`."""

    partition: int = 0
    high_before: int = 0
    low: int = 0
    high: int = 0
    took: int = 0
    kept: int = 0
    deleted: int = 0

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class TopicCounters:
    """A Kafka topic's watermarks over the test: what it took, of that what it keeps, and what
    its low watermark passed (deleted, read or not)."""

    topic: str = ""
    since: str | None = None
    at: str = ""
    partitions: int = 0
    took: int = 0
    kept: int = 0
    deleted: int = 0
    per_partition: tuple[PartitionCounts, ...] = ()
    caught_up: bool = False  # it took at least what it acknowledged to our senders
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_json(self) -> JsonObject:
        return _counts_json(self, "kafka")


@dataclass(frozen=True)
class AddressCounters:
    """A router's counts of one address (Qpid Dispatch Router's endpoint links): taken in, what
    it answered the senders, delivered out, what its consumers accepted, and what it acknowledged
    beyond that (dropped)."""

    address: str = ""
    since: str | None = None
    at: str = ""
    links_in: int = 0
    links_out: int = 0
    took: int = 0
    delivered: int = 0
    accepted: int = 0
    released: int = 0
    modified: int = 0
    rejected: int = 0
    unsettled: int = 0
    consumers_accepted: int = 0
    dropped: int = 0
    caught_up: bool = False  # it took what it acknowledged and delivered what our receivers got
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_json(self) -> JsonObject:
        return _counts_json(self, "router")

    def plus(self, other: AddressCounters) -> AddressCounters:
        """Two routers' counts of the address: added up, from the earlier first reading to the
        later last."""
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.type == "int"}
        since = min((s for s in (self.since, other.since) if s is not None), default=None)
        return replace(self, **summed, since=since, at=max(self.at, other.at))


SutCounters = QueueCounters | TopicCounters | AddressCounters
_CountsClass = type[QueueCounters] | type[TopicCounters] | type[AddressCounters]
_BY_SOURCE: dict[str, _CountsClass] = {
    "rabbitmq": QueueCounters,
    "kafka": TopicCounters,
    "router": AddressCounters,
}


def sut_counters_from_json(data: Mapping[str, Any]) -> SutCounters:
    """One SUT's counters by their `source`; a ValueError for a source this version does not know."""
    cls = _BY_SOURCE.get(str(data.get("source")))
    if cls is None:
        raise ValueError(f"SUT counters of an unknown source {data.get('source')!r}")
    return _counts_of(cls, data)


@dataclass(frozen=True)
class Accounting:
    """The three counts in total (null where one sender's is: a sum of some is no figure) and
    per sender, and the SUT's own counters where an inspector read them: a queue's, a topic's with
    its partitions, a router's address's, each with its `source` in JSON."""

    intended: int | None = None
    sent: int | None = None
    accepted: int | None = None
    received: int | None = None
    per_sender: tuple[AccountingRow, ...] = ()
    sut_counters: tuple[SutCounters, ...] = ()

    def to_json(self) -> JsonObject:
        return {
            "intended": self.intended,
            "sent": self.sent,
            "accepted": self.accepted,
            "received": self.received,
            "per_sender": [row.to_json() for row in self.per_sender],
            "sut_counters": [c.to_json() for c in self.sut_counters],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Accounting:
        return cls(
            intended=_int_or_none(data.get("intended")),
            sent=_int_or_none(data.get("sent")),
            accepted=_int_or_none(data.get("accepted")),
            received=_int_or_none(data.get("received")),
            per_sender=tuple(AccountingRow.from_json(row) for row in data.get("per_sender", ())),
            sut_counters=tuple(sut_counters_from_json(c) for c in data.get("sut_counters", ())),
        )


@dataclass(frozen=True)
class PeerFigures:
    """A peer's row of the figures. The optional ones are written only where they apply: `sent`
    for senders, `received` and the clock correction's for receivers, `generator_bound` and
    `inspector_shortfall` where there is something to say."""

    name: str
    role: str
    host: str | None = None
    failure: str | None = None
    sent: int | None = None
    received: int | None = None
    replies: int | None = None  # a requester's: replies in time, and requests without one
    timed_out: int | None = None
    latency_correction_us: float | None = None
    latency_uncertainty_us: float | None = None
    clock_path: str | None = None  # udp: measured directly; mqtt: through the control broker
    generator_bound: str | None = None  # why the load generator, not the SUT, was the limit
    inspector_shortfall: tuple[str, ...] = ()  # its series are missing or thin

    def to_json(self) -> JsonObject:
        row: JsonObject = {"name": self.name, "role": self.role, "host": self.host, "failure": self.failure}
        row |= {name: value for name in _PEER_OPTIONAL if (value := getattr(self, name)) is not None}
        if self.generator_bound:
            row["generator_bound"] = self.generator_bound
        if self.inspector_shortfall:
            row["inspector_shortfall"] = list(self.inspector_shortfall)
        return row

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PeerFigures:
        correction, uncertainty = data.get("latency_correction_us"), data.get("latency_uncertainty_us")
        return cls(
            name=str(data["name"]),
            role=str(data.get("role", "")),
            host=data.get("host"),
            failure=data.get("failure"),
            sent=_int_or_none(data.get("sent")),
            received=_int_or_none(data.get("received")),
            replies=_int_or_none(data.get("replies")),
            timed_out=_int_or_none(data.get("timed_out")),
            latency_correction_us=None if correction is None else float(correction),
            latency_uncertainty_us=None if uncertainty is None else float(uncertainty),
            clock_path=data.get("clock_path"),
            generator_bound=data.get("generator_bound"),
            inspector_shortfall=tuple(data.get("inspector_shortfall", ())),
        )


_PEER_OPTIONAL: tuple[str, ...] = ("sent", "received", "replies", "timed_out", "latency_correction_us")
_PEER_OPTIONAL += ("latency_uncertainty_us", "clock_path")


@dataclass(frozen=True)
class TestFigures:
    """A test's figures (reports.summary.summarize). Counts cover the whole test; rates and
    latency leave the warm-up out. `error`: why there are none (the data server could not read
    the folder, or was away); every other field is then its default and only `error` is
    written. `latency_untrusted` is the verdict's (coordinator.outcome.results.judge): why the
    latency is no figure."""

    test_id: str = ""
    duration_s: float = 0.0
    sent: int = 0
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    foreign: Mapping[str, int] = field(default_factory=dict)  # not ours: no header, another test's
    skipped_by_sut: int = 0  # of the lost: what the SUT's own numbering shows it passed over
    send_rate: Rate = Rate()
    receive_rate: Rate = Rate()
    latency_us: Percentiles = Percentiles()
    latency_samples: int = 0
    latency_distribution_us: tuple[tuple[float, float], ...] = ()  # (percentile, µs) for the HDR plot
    per_sender: tuple[SenderFigures, ...] = ()
    accounting: Accounting = Accounting()
    peers: tuple[PeerFigures, ...] = ()
    latency_clamped_by_correction: int = 0
    hints: tuple[str, ...] = ()
    latency_uncertainty_us: float = 0.0  # ± on every latency figure: the widest clock correction's
    clock_problems: tuple[str, ...] = ()
    clock_paths: tuple[str, ...] = ()
    load_model: str = "open"  # open: senders on a schedule; closed: requesters waiting for replies
    request_reply: RequestReplyFigures | None = None
    latency_untrusted: str | None = None
    # After the agents' faults: the slowest one's recovery, whole seconds from its end until a
    # second's arrivals are back at 95 % of the ten before it (reports.fault_windows); None
    # without a fault to measure.
    recovery_s: float | None = None
    error: str | None = None

    __test__ = False  # not a pytest class

    @classmethod
    def missing(cls, why: str) -> TestFigures:
        """No figures, and why."""
        return cls(error=why)

    def judged(self, latency_untrusted: str | None) -> TestFigures:
        return replace(self, latency_untrusted=latency_untrusted)

    def to_json(self) -> JsonObject:
        if self.error is not None:
            return {"error": self.error}
        out: JsonObject = {
            "test_id": self.test_id,
            "duration_s": self.duration_s,
            "sent": self.sent,
            "received": self.received,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "foreign": dict(self.foreign),
            "skipped_by_sut": self.skipped_by_sut,
            "send_rate": self.send_rate.to_json(),
            "receive_rate": self.receive_rate.to_json(),
            "latency_us": self.latency_us.to_json(),
            "latency_samples": self.latency_samples,
            "latency_distribution_us": [list(point) for point in self.latency_distribution_us],
            "per_sender": [row.to_json() for row in self.per_sender],
            "accounting": self.accounting.to_json(),
            "peers": [peer.to_json() for peer in self.peers],
            "latency_clamped_by_correction": self.latency_clamped_by_correction,
            "hints": list(self.hints),
            "latency_uncertainty_us": self.latency_uncertainty_us,
            "clock_problems": list(self.clock_problems),
            "clock_paths": list(self.clock_paths),
            "load_model": self.load_model,
        }
        if self.request_reply is not None:
            out["request_reply"] = self.request_reply.to_json()
        if self.recovery_s is not None:
            out["recovery_s"] = self.recovery_s
        out["latency_untrusted"] = self.latency_untrusted
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestFigures:
        """Figures as `to_json` wrote them, or as an earlier version did (a key it lacks takes
        its default); a ValueError where `data` is not figures at all."""
        if not isinstance(data, Mapping):
            raise ValueError(f"figures must be a JSON object, not {type(data).__name__}")
        if "error" in data:
            return cls.missing(str(data["error"]))
        rr = data.get("request_reply")
        latency = data.get("latency_us")
        if data.get("latency_samples") and not isinstance(latency, Mapping) and not data.get("latency_untrusted"):
            # Zeros in its place would read as a latency of 0 (a gate would pass it).
            raise ValueError("not a test's figures: latency samples without their latency_us")
        try:
            return cls(
                test_id=str(data.get("test_id", "")),
                duration_s=float(data.get("duration_s", 0.0)),
                sent=int(data.get("sent", 0)),
                received=int(data.get("received", 0)),
                lost=int(data.get("lost", 0)),
                duplicates=int(data.get("duplicates", 0)),
                foreign={str(k): int(v) for k, v in (data.get("foreign") or {}).items()},
                skipped_by_sut=int(data.get("skipped_by_sut", 0)),
                send_rate=Rate.from_json(data.get("send_rate")),
                receive_rate=Rate.from_json(data.get("receive_rate")),
                # summary.json writes none where the latency is no figure
                latency_us=Percentiles.from_json(data.get("latency_us") or {}),
                latency_samples=int(data.get("latency_samples", 0)),
                latency_distribution_us=tuple(
                    (p if isinstance(p, int) else float(p), float(v))
                    for p, v in data.get("latency_distribution_us", ())
                ),
                per_sender=tuple(SenderFigures.from_json(row) for row in data.get("per_sender", ())),
                accounting=Accounting.from_json(data.get("accounting") or {}),
                peers=tuple(PeerFigures.from_json(peer) for peer in data.get("peers", ())),
                latency_clamped_by_correction=int(data.get("latency_clamped_by_correction", 0)),
                hints=tuple(data.get("hints", ())),
                latency_uncertainty_us=float(data.get("latency_uncertainty_us", 0.0)),
                clock_problems=tuple(data.get("clock_problems", ())),
                clock_paths=tuple(data.get("clock_paths", ())),
                load_model=str(data.get("load_model", "open")),
                request_reply=None if not rr else RequestReplyFigures.from_json(rr),
                latency_untrusted=data.get("latency_untrusted"),
                recovery_s=None if data.get("recovery_s") is None else float(data["recovery_s"]),
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a test's figures ({type(exc).__name__}: {exc})") from exc

    def summary_json(self, outcome: str | None, reason: str | None) -> JsonObject:
        """summary.json: DESIGN.md's keys and the two on latency's trust, with the outcome and
        reason as the coordinator judged them; no latency where it is no figure."""
        full = self.to_json() | {"outcome": outcome, "reason": reason, "latency_untrusted": self.latency_untrusted}
        if self.latency_untrusted:
            full["latency_us"] = None
        return {key: full.get(key) for key in SUMMARY_KEYS}

    @property
    def hints_all(self) -> Sequence[str]:
        """The figures' hints and the closed system's, for a person to read."""
        return (*self.hints, *(self.request_reply.hints if self.request_reply else ()))


def write_summary_json(directory: Path, summary: JsonObject) -> Path:
    """A report's `summary.json` (`TestFigures.summary_json`, and a baseline's comparison where
    there is one), whole or not at all; its path."""
    path = directory / "summary.json"
    write_text_atomically(path, json.dumps(summary, indent=2))
    return path


def read_summary_json(path: Path) -> TestFigures:
    """A report's `summary.json` as figures (what it leaves out keeps its default); a ValueError
    naming the file when it is not one."""
    try:
        return TestFigures.from_json(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a test's summary ({exc})") from exc

"""What a peer leaves behind, typed: the file protocol, as `protocol.codec` is the wire's.

Each role's account is a frozen record that turns itself into the JSON its files hold
(`to_json`), back (`from_json`, which gives a key an older file lacks its default), and adds
another of its kind into itself (`merge`): a child process's counters into its parent's, a
peer's into a test's. `peer.json` is a `PeerRecord` around them, written and read here and
nowhere else; the reports read fields, never keys (a misspelt name fails where it is written,
not two packages away). The JSON is as it was before these records, key for key: golden
files pin it (tests/unit/protocol/test_results.py).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from protocol.atomic import write_text_atomically
from protocol.file_check import DamagedFileError, FileCheck
from protocol.json_value import JsonObject
from protocol.secrets import redact
from protocol.sequences import encode_bitset, load_bitset

__all__ = [
    "SEQUENCES_FILE",
    "ClientSent",
    "InspectorSummary",
    "PeerRecord",
    "ReceiverAccount",
    "ReplierAccount",
    "RequestReplyAccount",
    "SelfMonitorSummary",
    "SendCounts",
    "SenderAccount",
    "SenderDeliveries",
    "read_peer_json",
    "read_sequences",
    "write_peer_json",
    "write_sequences",
]

# A receiver's sequence numbers received, per sender: the reports merge several receivers'
# to tell lost from duplicated across them.
SEQUENCES_FILE = "receiver-sequences.json"


def _counts(value: Mapping[str, int] | None) -> dict[str, int]:
    return {str(k): int(v) for k, v in (value or {}).items()}


def _added(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return dict(Counter(a) + Counter(b)) if b else dict(a)


@dataclass(frozen=True)
class SendCounts:
    """A sending run's counters: what a child process tells its parent, added up with `merge`."""

    sent: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)  # by kind: nacked, unconfirmed, disconnected…
    retries: int = 0
    per_client: Mapping[int, int] = field(default_factory=dict)
    disconnects_ns: tuple[int, ...] = ()  # when a client found its connection gone (wall clock)
    reconnects_ns: tuple[int, ...] = ()  # the client library's own reconnects
    # By client, each in one process only: as `ClientSent` holds them.
    intended_per_client: Mapping[int, int | None] = field(default_factory=dict)
    accepted_per_client: Mapping[int, int | None] = field(default_factory=dict)
    in_flight: int = 0  # handed over, not yet settled

    def merge(self, other: SendCounts) -> SendCounts:
        return SendCounts(
            sent=self.sent + other.sent,
            errors=_added(self.errors, other.errors),
            retries=self.retries + other.retries,
            per_client=dict(Counter(self.per_client) + Counter(other.per_client)),
            disconnects_ns=tuple(sorted((*self.disconnects_ns, *other.disconnects_ns))),
            reconnects_ns=tuple(sorted((*self.reconnects_ns, *other.reconnects_ns))),
            intended_per_client={**self.intended_per_client, **other.intended_per_client},
            accepted_per_client={**self.accepted_per_client, **other.accepted_per_client},
            in_flight=self.in_flight + other.in_flight,
        )


@dataclass(frozen=True)
class ClientSent:
    """One client's stream: its number in the sender, how many it handed to the client library
    (`sent`), how many its schedule meant to send (`intended`; None: unbounded, or a file from
    before) and how many the SUT acknowledged (`accepted`; None: its driver's settings
    acknowledge nothing, or a file from before)."""

    client: int
    sent: int
    intended: int | None = None
    accepted: int | None = None

    def to_json(self) -> JsonObject:
        """Only the counts it has: a requester has neither, a sender without acknowledgements
        no `accepted`."""
        out: JsonObject = {"client": self.client, "sent": self.sent}
        if self.intended is not None:
            out["intended"] = self.intended
        if self.accepted is not None:
            out["accepted"] = self.accepted
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientSent:
        intended, accepted = data.get("intended"), data.get("accepted")
        return cls(
            int(data["client"]),
            int(data["sent"]),
            None if intended is None else int(intended),
            None if accepted is None else int(accepted),
        )


@dataclass(frozen=True)
class RequestReplyAccount:
    """A requester's closed system (seed 003): its clients, their think time, and the fate of
    its requests."""

    clients: int
    outstanding: int
    think_time: str
    think_time_mean_s: float
    think_time_measured_s: float | None  # from a reply to the next request, as lived; None if none
    request_timeout_s: float
    replies: int
    timed_out: int
    late: int
    duplicates: int
    foreign: Mapping[str, int] = field(default_factory=dict)
    skipped_by_sut: int = 0

    def to_json(self) -> JsonObject:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestReplyAccount:
        return cls(
            clients=int(data["clients"]),
            outstanding=int(data["outstanding"]),
            think_time=str(data.get("think_time", "")),
            think_time_mean_s=float(data.get("think_time_mean_s", 0.0)),
            think_time_measured_s=data.get("think_time_measured_s"),
            request_timeout_s=float(data.get("request_timeout_s", 0.0)),
            replies=int(data["replies"]),
            timed_out=int(data["timed_out"]),
            late=int(data["late"]),
            duplicates=int(data["duplicates"]),
            foreign=_counts(data.get("foreign")),
            skipped_by_sut=int(data.get("skipped_by_sut", 0)),
        )


@dataclass(frozen=True)
class SenderAccount:
    """What a sender (or a requester) sent: counts, errors by kind, its streams by sender key,
    and its schedule's lag (a requester has no schedule: None) or its closed system."""

    sent: int
    warm_up_end_ns: int
    warm_up_s: float
    errors: Mapping[str, int] = field(default_factory=dict)
    disconnects_ns: tuple[int, ...] = ()
    reconnects_ns: tuple[int, ...] = ()
    senders: Mapping[str, ClientSent] = field(default_factory=dict)  # by sender key (16 hex digits)
    retries: int | None = None  # sends tried again after the connection dropped (a scheduled sender's)
    schedule_lag_us: Mapping[str, float] | None = None  # "50", "99", "99.9", "max"
    request_reply: RequestReplyAccount | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "sent": self.sent,
            "warm_up_end_ns": self.warm_up_end_ns,
            "warm_up_s": self.warm_up_s,
            "errors": dict(self.errors),
            "disconnects_ns": list(self.disconnects_ns),
            "reconnects_ns": list(self.reconnects_ns),
            "senders": {key: c.to_json() for key, c in self.senders.items()},
        }
        if self.retries is not None:
            out["retries"] = self.retries
        if self.schedule_lag_us is not None:
            out["schedule_lag_us"] = dict(self.schedule_lag_us)
        if self.request_reply is not None:
            out["request_reply"] = self.request_reply.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SenderAccount:
        rr = data.get("request_reply")
        return cls(
            sent=int(data.get("sent", 0)),
            warm_up_end_ns=int(data.get("warm_up_end_ns", 0)),
            warm_up_s=float(data.get("warm_up_s", 0.0)),
            errors=_counts(data.get("errors")),
            disconnects_ns=tuple(data.get("disconnects_ns", ())),
            reconnects_ns=tuple(data.get("reconnects_ns", ())),
            senders={str(key): ClientSent.from_json(c) for key, c in data.get("senders", {}).items()},
            retries=data.get("retries"),
            schedule_lag_us=data.get("schedule_lag_us"),
            request_reply=RequestReplyAccount.from_json(rr) if rr is not None else None,
        )


@dataclass(frozen=True)
class SenderDeliveries:
    """One sender's stream as one receiver (or one of its processes) saw it."""

    received: int = 0  # distinct sequence numbers
    deliveries: int = 0  # every arrival, duplicates too
    duplicates: int = 0
    out_of_order: int = 0
    highest_sequence: int = -1
    missing_below_highest: int = 0

    def merge(self, other: SenderDeliveries) -> SenderDeliveries:
        """Two processes' shares of one stream. `received` and what follows from it are the
        sums, an upper bound: exact only once their sequence bitsets are merged (`exact`)."""
        return SenderDeliveries(
            received=self.received + other.received,
            deliveries=self.deliveries + other.deliveries,
            duplicates=self.duplicates + other.duplicates,
            out_of_order=self.out_of_order + other.out_of_order,
            highest_sequence=max(self.highest_sequence, other.highest_sequence),
            missing_below_highest=self.missing_below_highest + other.missing_below_highest,
        )

    def exact(self, distinct: int) -> SenderDeliveries:
        """The counts that follow from the distinct sequence numbers the merged bitsets hold."""
        return replace(
            self,
            received=distinct,
            duplicates=self.deliveries - distinct,
            missing_below_highest=self.highest_sequence + 1 - distinct,
        )

    def to_json(self) -> JsonObject:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SenderDeliveries:
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ReplierAccount:
    """A receiver that answered requests (request/reply): how many replies went, and those the
    SUT did not take, by kind."""

    replied: int = 0
    reply_errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReceiverAccount:
    """What a receiver got, sender by sender, and what its latency samples were moved by."""

    received: int
    foreign: Mapping[str, int] = field(default_factory=dict)  # not ours: no header, another test's
    latency_clamped: int = 0  # samples outside the histogram's range once corrected (worker.latency)
    latency_shift_us: int = 0  # the clock correction the samples were recorded with
    per_sender: Mapping[str, SenderDeliveries] = field(default_factory=dict)  # by sender key
    duplicates_per_s: Mapping[str, int] = field(default_factory=dict)  # by wall second
    reconnects_ns: tuple[int, ...] = ()
    skipped_by_sut: int = 0  # messages the SUT's own numbering shows it passed over (Kafka offsets)
    replier: ReplierAccount | None = None

    def merge(self, other: ReceiverAccount) -> ReceiverAccount:
        """Two processes' shares of one receiver. Each sender's stream is summed (`exact` makes
        it exact once their sequence bitsets are merged); the correction is the receiver's."""
        streams = dict(self.per_sender)
        for key, share in other.per_sender.items():
            streams[key] = streams[key].merge(share) if key in streams else share
        replier = self.replier or other.replier
        if self.replier is not None and other.replier is not None:
            replier = ReplierAccount(
                self.replier.replied + other.replier.replied,
                _added(self.replier.reply_errors, other.replier.reply_errors),
            )
        return ReceiverAccount(
            received=self.received + other.received,
            foreign=_added(self.foreign, other.foreign),
            latency_clamped=self.latency_clamped + other.latency_clamped,
            latency_shift_us=self.latency_shift_us,
            per_sender=streams,
            duplicates_per_s=_added(self.duplicates_per_s, other.duplicates_per_s),
            reconnects_ns=tuple(sorted((*self.reconnects_ns, *other.reconnects_ns))),
            skipped_by_sut=self.skipped_by_sut + other.skipped_by_sut,
            replier=replier,
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "received": self.received,
            "foreign": dict(self.foreign),
            "latency_clamped": self.latency_clamped,
            "latency_shift_us": self.latency_shift_us,
            "per_sender": {key: d.to_json() for key, d in self.per_sender.items()},
            "duplicates_per_s": dict(self.duplicates_per_s),
            "reconnects_ns": list(self.reconnects_ns),
            "skipped_by_sut": self.skipped_by_sut,
        }
        if self.replier is not None:
            out["replier"] = {"replied": self.replier.replied, "reply_errors": dict(self.replier.reply_errors)}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReceiverAccount:
        replier = data.get("replier")
        return cls(
            received=int(data.get("received", 0)),
            foreign=_counts(data.get("foreign")),
            latency_clamped=int(data.get("latency_clamped", 0)),
            latency_shift_us=int(data.get("latency_shift_us", 0)),
            per_sender={str(k): SenderDeliveries.from_json(v) for k, v in data.get("per_sender", {}).items()},
            duplicates_per_s=_counts(data.get("duplicates_per_s")),
            reconnects_ns=tuple(data.get("reconnects_ns", ())),
            skipped_by_sut=int(data.get("skipped_by_sut", 0)),
            replier=None
            if replier is None
            else ReplierAccount(int(replier.get("replied", 0)), _counts(replier.get("reply_errors"))),
        )


@dataclass(frozen=True)
class SelfMonitorSummary:
    """A worker's own load during its run: was it the limit?"""

    cpu_percent_mean: float = 0.0
    cpu_percent_max: float = 0.0
    loop_lag_ms_max: float = 0.0
    samples: int = 0


@dataclass(frozen=True)
class InspectorSummary:
    """One inspector's run: where it read, how often, what it got and what failed."""

    url: str = ""
    interval_s: float = 0.0
    samples: int = 0
    errors: int = 0
    last_error: str | None = None
    files: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


# The keys of peer.json that a worker's account does not make: the rest are its account's.
_COMMON = ("name", "host", "peer_id", "role", "test_id", "version", "options")
_RUN = (
    "python",
    "pid",
    "started_ns",
    "ended_ns",
    "failure",
    "self_monitor",
    "files",
    "checks",
    "inspectors",
    "events",
    "client_settings",
)
# The key of peer.json that holds the SHA-256 of the rest (`write_peer_json`).
_SELF_CHECK = "record_sha256"


@dataclass(frozen=True)
class PeerRecord:
    """A peer's account of its part in a test: `peer.json`. Who it is and the options it ran
    with; a worker's run (its process, its times, its own load, its files) and its account (a
    sender's or a receiver's, flattened into the same JSON object); an inspector's summaries, an
    agent's events."""

    name: str
    role: str
    host: str = ""
    peer_id: str = ""
    test_id: str = ""
    version: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # as SET gave them, passwords redacted
    files: tuple[str, ...] = ()
    checks: Mapping[str, FileCheck] | None = None  # what each file held when the peer closed it
    python: str | None = None
    pid: int | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    failure: str | None = None
    self_monitor: SelfMonitorSummary | None = None
    sender: SenderAccount | None = None
    receiver: ReceiverAccount | None = None
    inspectors: Mapping[str, InspectorSummary] | None = None
    events: tuple[Mapping[str, Any], ...] | None = None
    # A worker's client library and the settings it ran with, defaults named (worker.drivers)
    client_settings: Mapping[str, str] | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {name: _plain(getattr(self, name)) for name in _COMMON}
        worker = self.role in ("sender", "receiver")
        for name in _RUN:
            value = getattr(self, name)
            if value is None and not (worker and name == "failure"):  # a worker says it had none
                continue
            if name == "self_monitor":
                value = {f.name: getattr(value, f.name) for f in fields(value)}
            elif name in ("inspectors", "checks"):
                value = {k: v.to_json() for k, v in value.items()}
            out[name] = _plain(value)
        for account in (self.sender, self.receiver):
            if account is not None:
                out |= account.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PeerRecord:
        role = str(data.get("role", ""))
        monitor = data.get("self_monitor")
        inspectors = data.get("inspectors")
        events = data.get("events")
        checks = data.get("checks")
        settings = data.get("client_settings")
        return cls(
            name=str(data.get("name", "")),
            role=role,
            host=str(data.get("host", "")),
            peer_id=str(data.get("peer_id", "")),
            test_id=str(data.get("test_id", "")),
            version=str(data.get("version", "")),
            options=dict(data.get("options") or {}),
            files=tuple(data.get("files", ())),
            checks=None if checks is None else {str(k): FileCheck.from_json(v) for k, v in checks.items()},
            python=data.get("python"),
            pid=data.get("pid"),
            started_ns=data.get("started_ns"),
            ended_ns=data.get("ended_ns"),
            failure=data.get("failure"),
            self_monitor=SelfMonitorSummary(**monitor) if isinstance(monitor, Mapping) else None,
            sender=SenderAccount.from_json(data) if role == "sender" else None,
            receiver=ReceiverAccount.from_json(data) if role == "receiver" else None,
            inspectors=None
            if inspectors is None
            else {str(k): InspectorSummary(**{**v, "files": tuple(v.get("files", ()))}) for k, v in inspectors.items()},
            events=None if events is None else tuple(events),
            client_settings=None if settings is None else {str(k): str(v) for k, v in settings.items()},
        )


def _plain(value: Any) -> Any:
    """A record's value as JSON holds it: tuples as lists, mappings as dicts."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _sha256_of(data: Mapping[str, Any]) -> str:
    """Of a record's JSON in one canonical form: the same for the text written and for what a
    reader parses back from it, and for nothing that differs from it in a value."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_peer_json(directory: Path, record: PeerRecord) -> None:
    """A peer's account of its part in a test, written whole or not at all, with the SHA-256 of
    what it says: a digit changed on a disk or by a hand is found when it is read."""
    directory.mkdir(parents=True, exist_ok=True)
    data = json.loads(json.dumps(redact(record.to_json()), default=str))  # as a reader will parse it
    data[_SELF_CHECK] = _sha256_of(data)
    write_text_atomically(directory / "peer.json", json.dumps(data, indent=2, sort_keys=True))


def write_sequences(directory: Path, bitsets: Mapping[str, bytes]) -> None:
    """`receiver-sequences.json`: per sender key (16 hex digits), the bitset of the sequence
    numbers received (bit n: sequence n), compressed and base64-encoded; whole or not at all."""
    text = json.dumps({key: encode_bitset(bits) for key, bits in bitsets.items()})
    write_text_atomically(directory / SEQUENCES_FILE, text)


def read_sequences(directory: Path) -> dict[str, bytes]:
    """A receiver's `receiver-sequences.json` (none: no bitsets); a ValueError naming the file
    when it is not one."""
    path = directory / SEQUENCES_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not a receiver's sequences (not JSON: {exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a receiver's sequences (a JSON object of sender keys was expected)")
    bitsets = {}
    for key, value in data.items():
        try:
            bitsets[str(key)] = load_bitset(value)
        except (ValueError, TypeError, zlib.error) as exc:
            raise ValueError(f"{path}: not a receiver's sequences (sender {key}: no compressed bitset)") from exc
    return bitsets


def read_peer_json(path: Path) -> PeerRecord:
    """A peer.json; a ValueError naming the file when it is not one, or not what was written.
    One without its SHA-256 (written before there was one, or by hand) is taken as it is."""
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a peer's record (a JSON object)")
    written = data.pop(_SELF_CHECK, None)
    if written is not None and written != _sha256_of(data):
        raise DamagedFileError(f"{path}: changed since it was written (its SHA-256 is not the one it carries)")
    try:
        return PeerRecord.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{path}: not a peer's record ({type(exc).__name__}: {exc})") from exc

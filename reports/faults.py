"""The effect of each fault an agent injected, computed from the peers' own files (seed 004 §6.2).

A fault window runs from an agent action's start to its end (for `stop broker duration_s=10`,
the ten seconds; for `restart`, the time the restart took). For each window, with t0 its start
and t1 its end:

- outage: the longest pause in arrivals at the receivers that overlaps [t0, t1] or begins within
  a second after t1, when it is longer than five typical gaps before the fault (and 100 ms); its
  start and end (which may be long after t1: a broker that takes its time to come back).
- first publish / first consume after: the first message sent, and the first received, at or
  after t1, in seconds after t1.
- back to 95 %: from t1, how long until one second's arrivals reach 95 % of the mean rate in the
  ten seconds before t0 (searched in 100 ms steps, up to the next fault's start).
- p99 latency before (the 10 s before t0), during (t0 to the end of the fault or of its outage,
  whichever is later) and after (the 10 s after that), from the intended send time; before and
  after stop at a neighbouring fault.
- lost: messages intended to be sent in the fault's span (t0 to the later of t1 and the outage
  end) minus those of them that arrived; the span's duplicates (receivers count them per
  second); the disconnects senders rode out in it; and the reconnects the clients' libraries
  made (senders and receivers, where the library tells: paho, aio-pika) up to the end of "after".

Times are the peers' wall clocks; on one host, or with NTP, they line up with the agent's.

Every rate file is read where Spark runs its tasks, and turned there, with numpy, into cells
(window, kind, key, value) that Spark adds up (`groupBy().agg(sum, min)`): the driver gets
counts and firsts, never the messages. Two passes: the first brings the arrivals around each
fault (ten seconds before it to a second after it: what its outage is found in) and the first
arrival after that; the outages found fix the spans the second pass counts in: sends and
arrivals by intended time, latency by HDR bucket in the before/during/after spans, arrivals per
100 ms after the fault. `gather_in_memory` runs the same per-file functions over columns in
hand, for the known-answer tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from protocol.hdr import HIGHEST_US, LOWEST_US, bucket_indexes, histogram_of
from protocol.json_value import JsonObject
from protocol.ratefile import rate_columns
from reports.fault_windows import BEFORE_US, RECOVERED, Window, windows_from_events
from reports.summary import Peers
from reports.time_series import file_listing, rate_files

__all__ = [
    "Cells",
    "PeerEvents",
    "Window",
    "fault_effects",
    "gather_in_memory",
    "peer_events",
    "spark_gather",
    "windows_from_events",
]

OUTAGE_SLACK_US = 1_000_000
MIN_OUTAGE_US = 100_000
RECOVERY_STEP_US = 100_000
_STEPS_PER_SECOND = 1_000_000 // RECOVERY_STEP_US
_FAR = 2**62

# Kinds of cell. A count kind's cells add up (`total`); a first kind's keep the least value
# (`least`); LAST_BEFORE keeps the greatest, as the least of its negation.
START, FIRST_ARRIVAL, NEAR, AFTER_SLACK, LAST_BEFORE = 0, 1, 2, 3, 4  # the first pass
SENT, ARRIVED, FIRST_SEND, FIRST_CONSUME, SEEN_BEFORE, STEPS = 10, 11, 12, 13, 14, 15  # the second
LATENCY_BEFORE, LATENCY_DURING, LATENCY_AFTER = 20, 21, 22
_NO_WINDOW = -1


@dataclass(frozen=True)
class Cells:
    """Columns of (window, kind, key, value) cells; once gathered, `total` and `least` are the sum
    and the minimum of the values of each (window, kind, key)."""

    window: np.ndarray
    kind: np.ndarray
    key: np.ndarray
    total: np.ndarray
    least: np.ndarray

    def counts(self, window: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys of a count kind, sorted, and their totals."""
        mine = (self.window == window) & (self.kind == kind)
        order = np.argsort(self.key[mine], kind="stable")
        return self.key[mine][order], self.total[mine][order]

    def count(self, window: int, kind: int) -> int:
        return int(self.counts(window, kind)[1].sum())

    def first(self, window: int, kind: int) -> int | None:
        mine = (self.window == window) & (self.kind == kind)
        return int(self.least[mine].min()) if mine.any() else None


# A function from one rate file's role and (eta, ata) columns to its cells, in `total`.
PerFile = Callable[[str, np.ndarray, np.ndarray], Cells]
# Runs a PerFile over every rate file of the test and gathers the cells.
Gather = Callable[[PerFile], Cells]


def _cells(parts: list[tuple[int, int, np.ndarray, np.ndarray]]) -> Cells:
    """(window, kind, keys, values) parts into cells, their values in both `total` and `least`."""
    if not parts:
        empty = np.empty(0, np.int64)
        return Cells(empty, empty, empty, empty, empty)
    sizes = [len(keys) for _, _, keys, _ in parts]
    values = np.concatenate([np.asarray(v, np.int64) for _, _, _, v in parts])
    return Cells(
        np.repeat([w for w, _, _, _ in parts], sizes).astype(np.int64),
        np.repeat([k for _, k, _, _ in parts], sizes).astype(np.int64),
        np.concatenate([np.asarray(keys, np.int64) for _, _, keys, _ in parts]),
        values,
        values,
    )


def _one(window: int, kind: int, value: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    return window, kind, np.zeros(1, np.int64), np.array([value], np.int64)


def _tally(window: int, kind: int, keys: np.ndarray) -> tuple[int, int, np.ndarray, np.ndarray]:
    unique, counts = np.unique(keys, return_counts=True)
    return window, kind, unique, counts


@dataclass(frozen=True)
class _Near:
    """The first pass: what each window's outage is found in."""

    windows: tuple[tuple[int, int], ...]  # (t0, t1)

    def __call__(self, role: str, eta: np.ndarray, ata: np.ndarray) -> Cells:
        if not len(ata):
            return _cells([])
        first = int(ata.min())
        parts = [_one(_NO_WINDOW, START, first)]
        if role == "receiver":
            parts.append(_one(_NO_WINDOW, FIRST_ARRIVAL, first))
            for w, (t0, t1) in enumerate(self.windows):
                lo, hi = t0 - BEFORE_US, t1 + OUTAGE_SLACK_US
                parts.append(_tally(w, NEAR, ata[(ata >= lo) & (ata <= hi)]))
                later, earlier = ata[ata > hi], ata[ata < lo]
                if len(later):
                    parts.append(_one(w, AFTER_SLACK, int(later.min())))
                if len(earlier):
                    parts.append(_one(w, LAST_BEFORE, -int(earlier.max())))
        return _cells(parts)


@dataclass(frozen=True)
class _Span:
    t0: int
    t1: int
    span_end: int  # the later of t1 and the outage's end
    seen_from: int  # the start of "before" as far as there were arrivals
    after_to: int
    horizon: int  # where the search for the rate's recovery stops


@dataclass(frozen=True)
class _Counts:
    """The second pass: each window's counts in the spans its outage fixed."""

    spans: tuple[_Span, ...]

    def __call__(self, role: str, eta: np.ndarray, ata: np.ndarray) -> Cells:
        parts = []
        latency = np.clip(ata - eta, LOWEST_US, HIGHEST_US) if role == "receiver" else None
        for w, s in enumerate(self.spans):
            intended = (eta >= s.t0) & (eta < s.span_end)
            after = ata[ata >= s.t1]
            if role == "sender":
                parts.append(_one(w, SENT, int(intended.sum())))
                if len(after):
                    parts.append(_one(w, FIRST_SEND, int(after.min())))
                continue
            if role != "receiver" or latency is None:
                continue
            parts.append(_one(w, ARRIVED, int(intended.sum())))
            if len(after):
                parts.append(_one(w, FIRST_CONSUME, int(after.min())))
            parts.append(_one(w, SEEN_BEFORE, int(((ata >= s.seen_from) & (ata < s.t0)).sum())))
            for kind, lo, hi in (
                (LATENCY_BEFORE, s.seen_from, s.t0),
                (LATENCY_DURING, s.t0, s.span_end),
                (LATENCY_AFTER, s.span_end, s.after_to),
            ):
                parts.append(_tally(w, kind, bucket_indexes(latency[(ata >= lo) & (ata < hi)])))
            recovering = after[after < s.horizon]
            parts.append(_tally(w, STEPS, (recovering - s.t1) // RECOVERY_STEP_US))
        return _cells(parts)


def gather_in_memory(columns: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> Gather:
    """A Gather over (role, eta, ata) columns in hand, adding up as Spark does."""

    def gather(per_file: PerFile) -> Cells:
        parts = [per_file(role, np.asarray(eta, np.int64), np.asarray(ata, np.int64)) for role, eta, ata in columns]
        return _merged(parts)

    return gather


def _merged(parts: Sequence[Cells]) -> Cells:
    if not parts:
        return _cells([])
    window, kind, key, total, least = (np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS)
    if not len(window):
        return Cells(window, kind, key, total, least)
    groups, inverse = np.unique(np.stack([window, kind, key]), axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    sums = np.zeros(groups.shape[1], np.int64)
    np.add.at(sums, inverse, total)
    mins = np.full(groups.shape[1], _FAR, np.int64)
    np.minimum.at(mins, inverse, least)
    return Cells(groups[0], groups[1], groups[2], sums, mins)


_FIELDS = ("window", "kind", "key", "total", "least")
_LISTING = "role string, path string"
_CELL_SCHEMA = "window long, kind long, key long, value long"


def spark_gather(spark: Any, peers: Peers) -> Gather:
    """A Gather over the test's rate files: each Spark task reads a share of them."""
    files = [(role, path) for role, _, path in rate_files(peers)]

    def gather(per_file: PerFile) -> Cells:
        from pyspark.sql import functions as F  # noqa: PLC0415, N812 - pyspark's own convention

        if not files:
            return _merged([])
        listing = file_listing(spark, files, _LISTING)
        table = (
            listing.mapInArrow(_FileCells(per_file), _CELL_SCHEMA)
            .groupBy("window", "kind", "key")
            .agg(F.sum("value").alias("total"), F.min("value").alias("least"))
            .toArrow()
        )
        return Cells(*(table.column(name).to_numpy().astype(np.int64) for name in _FIELDS))

    return gather


@dataclass(frozen=True)
class _FileCells:
    """The task Spark runs: each listed file's cells, as an Arrow record batch."""

    per_file: PerFile

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa  # noqa: PLC0415 - Spark's Python workers import it anyway

        for batch in batches:
            listed = batch.to_pydict()
            for role, path in zip(listed["role"], listed["path"], strict=True):
                eta, ata = rate_columns(Path(path).read_bytes(), path)
                cells = self.per_file(role, eta, ata)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, pa.int64()) for c in (cells.window, cells.kind, cells.key, cells.total)],
                    names=["window", "kind", "key", "value"],
                )


@dataclass(frozen=True)
class PeerEvents:
    """What the peers' own records tell about a fault, beyond their rate files."""

    duplicates_per_s: dict[int, int] = field(default_factory=dict)
    disconnects_us: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # sorted
    reconnects_us: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # sorted


def peer_events(peers: Peers) -> PeerEvents:
    duplicates: dict[int, int] = {}
    disconnects: list[int] = []
    reconnects: list[int] = []
    for _, info in peers:
        if info.receiver is not None:
            for second, count in info.receiver.duplicates_per_s.items():
                duplicates[int(second)] = duplicates.get(int(second), 0) + count
            reconnects += [t // 1000 for t in info.receiver.reconnects_ns]
        if info.sender is not None:
            disconnects += [t // 1000 for t in info.sender.disconnects_ns]
            reconnects += [t // 1000 for t in info.sender.reconnects_ns]
    return PeerEvents(duplicates, np.sort(np.array(disconnects, np.int64)), np.sort(np.array(reconnects, np.int64)))


def fault_effects(windows: Sequence[Window], gather: Gather, events: PeerEvents | None = None) -> list[JsonObject]:
    """A row per window. "Before" and "after" stop where a neighbouring fault begins or ends, so
    that one fault's effect is not counted as another's."""
    events = events or PeerEvents()
    ordered = sorted(windows, key=lambda w: w.start_us)
    if not ordered:
        return []
    near = gather(_Near(tuple((w.start_us, w.end_us) for w in ordered)))
    origin = near.first(_NO_WINDOW, START) or 0
    first_arrival = near.first(_NO_WINDOW, FIRST_ARRIVAL)
    outages = [_outage(_arrivals_near(near, i), w) for i, w in enumerate(ordered)]
    spans = []
    previous_end = -_FAR
    for i, (w, outage) in enumerate(zip(ordered, outages, strict=True)):
        next_start = ordered[i + 1].start_us if i + 1 < len(ordered) else _FAR
        span_end = max(w.end_us, outage[1] if outage else w.end_us)
        before_from = max(w.start_us - BEFORE_US, previous_end)
        # The rate before: over the ten seconds before the fault, or as much of them as there was.
        seen_from = w.start_us if first_arrival is None else min(max(before_from, first_arrival), w.start_us)
        after_to = max(span_end, min(span_end + BEFORE_US, next_start))
        horizon = next_start if next_start > w.end_us else _FAR
        spans.append(_Span(w.start_us, w.end_us, span_end, seen_from, after_to, horizon))
        previous_end = max(previous_end, span_end)
    counts = gather(_Counts(tuple(spans)))
    return [
        _row(i, w, outage=outage, span=s, counts=counts, events=events, origin=origin)
        for i, (w, outage, s) in enumerate(zip(ordered, outages, spans, strict=True))
    ]


def _arrivals_near(near: Cells, window: int) -> np.ndarray:
    """A window's arrivals from ten seconds before it to a second after, with the one before
    and the one after those, sorted: all the gaps its outage can be."""
    keys, totals = near.counts(window, NEAR)
    last_before, after = near.first(window, LAST_BEFORE), near.first(window, AFTER_SLACK)
    around = [[-last_before] if last_before is not None else [], np.repeat(keys, totals), [after] if after else []]
    return np.concatenate([np.asarray(a, np.int64) for a in around])


def _row(
    w: int,
    window: Window,
    *,
    outage: tuple[int, int] | None,
    span: _Span,
    counts: Cells,
    events: PeerEvents,
    origin: int,
) -> JsonObject:
    s = span
    seconds_before = (s.t0 - s.seen_from) / 1e6
    baseline = counts.count(w, SEEN_BEFORE) / seconds_before if seconds_before > 0 else 0.0
    first_second, last_second = s.t0 // 1_000_000, s.after_to // 1_000_000
    return {
        "agent": window.agent,
        "fault": f"{window.action} {window.target}".strip() + (f" ({window.detail})" if window.detail else ""),
        "error": window.error,
        "start_s": round((s.t0 - origin) / 1e6, 3),
        "end_s": round((s.t1 - origin) / 1e6, 3),
        "outage_s": round((outage[1] - outage[0]) / 1e6, 3) if outage else 0.0,
        "outage_from_s": round((outage[0] - origin) / 1e6, 3) if outage else None,
        "first_publish_after_s": _seconds_after(counts.first(w, FIRST_SEND), s.t1),
        "first_consume_after_s": _seconds_after(counts.first(w, FIRST_CONSUME), s.t1),
        "back_to_95_percent_s": _back_to(*counts.counts(w, STEPS), RECOVERED * baseline),
        "rate_before_per_s": round(baseline, 1),
        "p99_before_ms": _p99_ms(*counts.counts(w, LATENCY_BEFORE)),
        "p99_during_ms": _p99_ms(*counts.counts(w, LATENCY_DURING)),
        "p99_after_ms": _p99_ms(*counts.counts(w, LATENCY_AFTER)),
        "lost": max(0, counts.count(w, SENT) - counts.count(w, ARRIVED)),
        "duplicates": sum(n for sec, n in events.duplicates_per_s.items() if first_second <= sec <= last_second),
        "disconnects": _count(events.disconnects_us, s.t0, s.span_end + 1),
        "reconnects": _count(events.reconnects_us, s.t0, s.after_to + 1),
    }


def _count(sorted_values: np.ndarray, lo: int, hi: int) -> int:
    """How many values lie in [lo, hi)."""
    return int(np.searchsorted(sorted_values, hi) - np.searchsorted(sorted_values, lo))


def _outage(arrivals: np.ndarray, w: Window) -> tuple[int, int] | None:
    lo = max(0, int(np.searchsorted(arrivals, w.start_us)) - 1)
    # The pause must begin by the fault's end (and a second's slack): a later one is another story.
    hi = min(int(np.searchsorted(arrivals, w.end_us + OUTAGE_SLACK_US, side="right")) + 1, len(arrivals))
    if hi - lo < 2:
        return None
    before = arrivals[int(np.searchsorted(arrivals, w.start_us - BEFORE_US)) : lo + 1]
    gaps_before = np.sort(np.diff(before))
    typical = int(gaps_before[len(gaps_before) // 2]) if len(gaps_before) else 0
    threshold = max(MIN_OUTAGE_US, 5 * typical)
    gaps = np.diff(arrivals[lo:hi])
    i = len(gaps) - 1 - int(np.argmax(gaps[::-1]))  # the last of the longest
    if gaps[i] <= threshold:
        return None
    return int(arrivals[lo + i]), int(arrivals[lo + i + 1])


def _seconds_after(first: int | None, when: int) -> float | None:
    return round((first - when) / 1e6, 3) if first is not None else None


def _back_to(steps: np.ndarray, counts: np.ndarray, target_per_s: float) -> float | None:
    """The first 100 ms step from which a second's arrivals (ten steps) reach the target."""
    if target_per_s <= 0 or not len(steps):
        return None
    per_step = np.zeros(int(steps[-1]) + _STEPS_PER_SECOND, np.int64)
    per_step[steps] = counts
    running = np.r_[0, np.cumsum(per_step)]
    seconds = running[_STEPS_PER_SECOND:] - running[:-_STEPS_PER_SECOND]  # from each step on
    reached = np.flatnonzero(seconds[: int(steps[-1]) + 1] >= target_per_s)
    return round(int(reached[0]) * RECOVERY_STEP_US / 1e6, 1) if len(reached) else None


def _p99_ms(indexes: np.ndarray, counts: np.ndarray) -> float | None:
    if not counts.sum():
        return None
    return round(histogram_of(indexes, counts).get_value_at_percentile(99) / 1000, 3)

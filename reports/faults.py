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
  ten seconds before t0 (searched in 100 ms steps).
- p99 latency before (the 10 s before t0), during (t0 to the end of the fault or of its outage,
  whichever is later) and after (the 10 s after that), from the intended send time; before and
  after stop at a neighbouring fault.
- lost: messages intended to be sent in the fault's span (t0 to the later of t1 and the outage
  end) minus those of them that arrived; the span's duplicates (receivers count them per
  second); the disconnects senders rode out in it; and the reconnects the clients' libraries
  made (senders and receivers, where the library tells: paho, aio-pika) up to the end of "after".

Times are the peers' wall clocks; on one host, or with NTP, they line up with the agent's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from protocol.ratefile import rate_columns
from reports.summary import Peers

__all__ = ["Traffic", "Window", "fault_effects", "read_traffic", "windows_from_events"]

BEFORE_US = 10_000_000
OUTAGE_SLACK_US = 1_000_000
MIN_OUTAGE_US = 100_000
RECOVERY_STEP_US = 100_000


@dataclass(frozen=True)
class Window:
    agent: str
    action: str
    target: str
    start_us: int
    end_us: int
    detail: str = ""
    error: str | None = None


@dataclass
class Traffic:
    """Every message's times, as sorted int64 columns (µs): numpy, not a tuple per message, so a
    night's worth fits in memory and each question is a binary search."""

    send_times_us: np.ndarray  # actual send times, sorted
    send_intended_us: np.ndarray  # intended send times of the messages sent, sorted
    arrival_us: np.ndarray  # first deliveries' arrival times, sorted
    arrival_latency_us: np.ndarray  # their arrival minus intended time, in arrival order
    arrival_intended_us: np.ndarray  # their intended send times, sorted
    duplicates_per_s: dict[int, int]
    disconnects_us: np.ndarray  # sorted
    reconnects_us: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # sorted

    @classmethod
    def of(
        cls,
        sends: tuple[np.ndarray, np.ndarray],
        arrivals: tuple[np.ndarray, np.ndarray],
        duplicates_per_s: dict[int, int],
        disconnects_us: Sequence[int] = (),
        reconnects_us: Sequence[int] = (),
    ) -> Traffic:
        """From (eta, ata) columns of the sends and of the arrivals, in any order."""
        arrival_eta, arrival_ata = (np.asarray(c, np.int64) for c in arrivals)
        order = np.argsort(arrival_ata, kind="stable")
        return cls(
            send_times_us=np.sort(np.asarray(sends[1], np.int64)),
            send_intended_us=np.sort(np.asarray(sends[0], np.int64)),
            arrival_us=arrival_ata[order],
            arrival_latency_us=(arrival_ata - arrival_eta)[order],
            arrival_intended_us=np.sort(arrival_eta),
            duplicates_per_s=duplicates_per_s,
            disconnects_us=np.sort(np.asarray(disconnects_us, np.int64)),
            reconnects_us=np.sort(np.asarray(reconnects_us, np.int64)),
        )

    @property
    def start_us(self) -> int:
        firsts = [int(c[0]) for c in (self.send_times_us, self.arrival_us) if len(c)]
        return min(firsts, default=0)


def read_traffic(peers: Peers) -> Traffic:
    columns: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"sender": [], "receiver": []}
    duplicates: dict[int, int] = {}
    disconnects: list[int] = []
    reconnects: list[int] = []
    for directory, info in peers:
        role = info.get("role")
        if role not in columns:
            continue
        for name in info.get("files", []):
            if name.endswith(".csv.gz"):
                columns[role].append(rate_columns((directory / name).read_bytes(), str(directory / name)))
        for second, count in info.get("duplicates_per_s", {}).items():
            duplicates[int(second)] = duplicates.get(int(second), 0) + count
        disconnects += [t // 1000 for t in info.get("disconnects_ns", [])]
        reconnects += [t // 1000 for t in info.get("reconnects_ns", [])]

    def joined(role: str) -> tuple[np.ndarray, np.ndarray]:
        parts = columns[role]
        if not parts:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate([e for e, _ in parts]), np.concatenate([a for _, a in parts])

    return Traffic.of(joined("sender"), joined("receiver"), duplicates, disconnects, reconnects)


def windows_from_events(events: Iterable[dict[str, Any]]) -> list[Window]:
    """Pair each action's start with its end, from test.json's events (ISO times)."""
    open_: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = {}
    windows = []
    for event in events:
        if "phase" not in event or "time" not in event:
            continue  # a handler's result, not an action
        key = (str(event.get("agent", "")), str(event["action"]), str(event.get("target", "")))
        when = int(datetime.fromisoformat(event["time"]).timestamp() * 1_000_000)
        if event["phase"] == "start":
            open_[key] = (when, event)
        elif event["phase"] == "end" and key in open_:
            start, first = open_.pop(key)
            skip = {"agent", "action", "target", "time", "phase", "duration_s", "error", "restored"}
            detail = " ".join(f"{k}={v}" for k, v in first.items() if k not in skip and v not in (None, ""))
            windows.append(Window(*key, start, when, detail, event.get("error")))
    return sorted(windows, key=lambda w: w.start_us)


def fault_effects(windows: Sequence[Window], traffic: Traffic) -> list[dict[str, Any]]:
    """A row per window. "Before" and "after" stop where a neighbouring fault begins or ends, so
    that one fault's effect is not counted as another's."""
    origin = traffic.start_us
    arrival_times = traffic.arrival_us
    ordered = sorted(windows, key=lambda w: w.start_us)
    rows = []
    previous_end = -(2**62)
    for i, w in enumerate(ordered):
        next_start = ordered[i + 1].start_us if i + 1 < len(ordered) else 2**62
        row, span_end = _effect(
            w, traffic, arrival_times, origin=origin, previous_end=previous_end, next_start=next_start
        )
        rows.append(row)
        previous_end = max(previous_end, span_end)
    return rows


def _effect(
    w: Window, t: Traffic, arrival_times: np.ndarray, *, origin: int, previous_end: int, next_start: int
) -> tuple[dict[str, Any], int]:
    outage = _outage(arrival_times, w)
    span_end = max(w.end_us, outage[1] if outage else w.end_us)
    before_from = max(w.start_us - BEFORE_US, previous_end)
    after_to = max(span_end, min(span_end + BEFORE_US, next_start))
    # The rate before: over the ten seconds before the fault, or as much of them as there was.
    seen_from = max(before_from, int(arrival_times[0]) if len(arrival_times) else w.start_us)
    seconds_before = (w.start_us - seen_from) / 1e6
    baseline = _count(arrival_times, seen_from, w.start_us) / seconds_before if seconds_before > 0 else 0.0
    sent = _count(t.send_intended_us, w.start_us, span_end)
    arrived = _count(t.arrival_intended_us, w.start_us, span_end)
    first_second, last_second = w.start_us // 1_000_000, after_to // 1_000_000
    return {
        "agent": w.agent,
        "fault": f"{w.action} {w.target}".strip() + (f" ({w.detail})" if w.detail else ""),
        "error": w.error,
        "start_s": round((w.start_us - origin) / 1e6, 3),
        "end_s": round((w.end_us - origin) / 1e6, 3),
        "outage_s": round((outage[1] - outage[0]) / 1e6, 3) if outage else 0.0,
        "outage_from_s": round((outage[0] - origin) / 1e6, 3) if outage else None,
        "first_publish_after_s": _first_after(t.send_times_us, w.end_us),
        "first_consume_after_s": _first_after(arrival_times, w.end_us),
        "back_to_95_percent_s": _back_to(arrival_times, w.end_us, 0.95 * baseline),
        "rate_before_per_s": round(baseline, 1),
        "p99_before_ms": _p99_ms(t, before_from, w.start_us),
        "p99_during_ms": _p99_ms(t, w.start_us, span_end),
        "p99_after_ms": _p99_ms(t, span_end, after_to),
        "lost": max(0, sent - arrived),
        "duplicates": sum(n for s, n in t.duplicates_per_s.items() if first_second <= s <= last_second),
        "disconnects": _count(t.disconnects_us, w.start_us, span_end + 1),
        "reconnects": _count(t.reconnects_us, w.start_us, after_to + 1),
    }, span_end


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


def _first_after(sorted_values: np.ndarray, when: int) -> float | None:
    i = int(np.searchsorted(sorted_values, when))
    return round((int(sorted_values[i]) - when) / 1e6, 3) if i < len(sorted_values) else None


def _back_to(arrivals: np.ndarray, end: int, target_per_s: float) -> float | None:
    if target_per_s <= 0 or not len(arrivals):
        return None
    starts = np.arange(end, int(arrivals[-1]) + 1, RECOVERY_STEP_US)
    counts = np.searchsorted(arrivals, starts + 1_000_000) - np.searchsorted(arrivals, starts)
    reached = np.flatnonzero(counts >= target_per_s)
    return round((int(starts[reached[0]]) - end) / 1e6, 1) if len(reached) else None


def _p99_ms(t: Traffic, lo: int, hi: int) -> float | None:
    i, j = np.searchsorted(t.arrival_us, [lo, hi])
    latencies = np.sort(t.arrival_latency_us[i:j])
    if not len(latencies):
        return None
    rank = max(0, math.ceil(0.99 * len(latencies)) - 1)  # nearest rank
    return round(int(latencies[rank]) / 1000, 3)

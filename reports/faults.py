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

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from protocol.ratefile import read_rate_file
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
    send_times_us: list[int]  # actual send times, sorted
    send_intended_us: list[int]  # intended send times of the messages sent, sorted
    arrivals: list[tuple[int, int]]  # (arrival, intended) of first deliveries, by arrival
    arrival_intended_us: list[int]  # their intended send times, sorted
    duplicates_per_s: dict[int, int]
    disconnects_us: list[int]  # sorted
    reconnects_us: list[int] = field(default_factory=list)  # senders' and receivers' libraries', sorted

    @property
    def start_us(self) -> int:
        return min(self.send_times_us[:1] + [a for a, _ in self.arrivals[:1]], default=0)


def read_traffic(peers: Peers) -> Traffic:
    sends: list[tuple[int, int]] = []
    arrivals: list[tuple[int, int]] = []
    duplicates: dict[int, int] = {}
    disconnects: list[int] = []
    reconnects: list[int] = []
    for directory, info in peers:
        role = info.get("role")
        if role not in ("sender", "receiver"):
            continue
        for name in info.get("files", []):
            if name.endswith(".csv.gz"):
                rows = list(read_rate_file(directory / name))
                if role == "sender":
                    sends += rows
                else:
                    arrivals += [(ata, eta) for eta, ata in rows]
        for second, count in info.get("duplicates_per_s", {}).items():
            duplicates[int(second)] = duplicates.get(int(second), 0) + count
        disconnects += [t // 1000 for t in info.get("disconnects_ns", [])]
        reconnects += [t // 1000 for t in info.get("reconnects_ns", [])]
    arrivals.sort()
    return Traffic(
        send_times_us=sorted(ata for _, ata in sends),
        send_intended_us=sorted(eta for eta, _ in sends),
        arrivals=arrivals,
        arrival_intended_us=sorted(eta for _, eta in arrivals),
        duplicates_per_s=duplicates,
        disconnects_us=sorted(disconnects),
        reconnects_us=sorted(reconnects),
    )


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
    arrival_times = [a for a, _ in traffic.arrivals]
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
    w: Window, t: Traffic, arrival_times: list[int], *, origin: int, previous_end: int, next_start: int
) -> tuple[dict[str, Any], int]:
    outage = _outage(arrival_times, w)
    span_end = max(w.end_us, outage[1] if outage else w.end_us)
    before_from = max(w.start_us - BEFORE_US, previous_end)
    after_to = max(span_end, min(span_end + BEFORE_US, next_start))
    # The rate before: over the ten seconds before the fault, or as much of them as there was.
    seen_from = max(before_from, arrival_times[0] if arrival_times else w.start_us)
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
        "p99_before_ms": _p99_ms(t.arrivals, before_from, w.start_us),
        "p99_during_ms": _p99_ms(t.arrivals, w.start_us, span_end),
        "p99_after_ms": _p99_ms(t.arrivals, span_end, after_to),
        "lost": max(0, sent - arrived),
        "duplicates": sum(n for s, n in t.duplicates_per_s.items() if first_second <= s <= last_second),
        "disconnects": _count(t.disconnects_us, w.start_us, span_end + 1),
        "reconnects": _count(t.reconnects_us, w.start_us, after_to + 1),
    }, span_end


def _count(sorted_values: Sequence[int], lo: int, hi: int) -> int:
    """How many values lie in [lo, hi)."""
    return bisect.bisect_left(sorted_values, hi) - bisect.bisect_left(sorted_values, lo)


def _outage(arrivals: Sequence[int], w: Window) -> tuple[int, int] | None:
    lo = max(0, bisect.bisect_left(arrivals, w.start_us) - 1)
    # The pause must begin by the fault's end (and a second's slack): a later one is another story.
    hi = bisect.bisect_right(arrivals, w.end_us + OUTAGE_SLACK_US) + 1
    hi = min(hi, len(arrivals))
    if hi - lo < 2:
        return None
    before = arrivals[bisect.bisect_left(arrivals, w.start_us - BEFORE_US) : lo + 1]
    gaps_before = sorted(b - a for a, b in itertools.pairwise(before))
    typical = gaps_before[len(gaps_before) // 2] if gaps_before else 0
    threshold = max(MIN_OUTAGE_US, 5 * typical)
    best = max(((arrivals[i + 1] - arrivals[i], i) for i in range(lo, hi - 1)), default=(0, -1))
    if best[0] <= threshold:
        return None
    return arrivals[best[1]], arrivals[best[1] + 1]


def _first_after(sorted_values: Sequence[int], when: int) -> float | None:
    i = bisect.bisect_left(sorted_values, when)
    return round((sorted_values[i] - when) / 1e6, 3) if i < len(sorted_values) else None


def _back_to(arrivals: Sequence[int], end: int, target_per_s: float) -> float | None:
    if target_per_s <= 0 or not arrivals:
        return None
    step = 0
    while end + step <= arrivals[-1]:
        if _count(arrivals, end + step, end + step + 1_000_000) >= target_per_s:
            return round(step / 1e6, 1)
        step += RECOVERY_STEP_US
    return None


def _p99_ms(arrivals: Sequence[tuple[int, int]], lo: int, hi: int) -> float | None:
    i, j = bisect.bisect_left(arrivals, (lo, -math.inf)), bisect.bisect_left(arrivals, (hi, -math.inf))
    latencies = sorted(a - intended for a, intended in arrivals[i:j])
    if not latencies:
        return None
    rank = max(0, math.ceil(0.99 * len(latencies)) - 1)  # nearest rank
    return round(latencies[rank] / 1000, 3)

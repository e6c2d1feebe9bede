"""The agents' faults as windows of time, from test.json's events, and how long the arrivals took
to come back after each: what the summary gates (`recovery_s`) and the report's fault table
measures finer (reports.faults: 100 ms steps from the rate files).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["BEFORE_US", "RECOVERED", "Window", "recovery_after_faults", "windows_from_events"]

# A fault's "before": the ten seconds up to its start, and "recovered": a second's arrivals back
# at 95 % of their mean rate then.
BEFORE_US = 10_000_000
RECOVERED = 0.95


@dataclass(frozen=True)
class Window:
    agent: str
    action: str
    target: str
    start_us: int
    end_us: int
    detail: str = ""
    error: str | None = None


def windows_from_events(events: Iterable[Mapping[str, Any]]) -> list[Window]:
    """Pair each action's start with its end, from test.json's events (ISO times)."""
    open_: dict[tuple[str, str, str], tuple[int, Mapping[str, Any]]] = {}
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


def recovery_after_faults(per_second: Mapping[int, int], windows: Sequence[Window]) -> float | None:
    """The slowest recovery of the faults, in whole seconds: for each, from its end to the first
    whole second, at or after the one it ended in, whose arrivals reach 95 % of the mean of the
    whole seconds in the ten before it began (none earlier than the previous fault's end). One
    that never does counts to the last whole second of arrivals (the test's final second is
    partial and never counts). None where no fault had arrivals before it to measure against,
    or no whole second after it. `per_second`: arrivals by second of their arrival time."""
    if not per_second:
        return None
    last = max(per_second) - 1  # the final second is partial
    ordered = sorted(windows, key=lambda w: w.start_us)
    slowest: float | None = None
    for i, w in enumerate(ordered):
        first_before = max(
            (w.start_us - BEFORE_US) // 1_000_000 + 1, ordered[i - 1].end_us // 1_000_000 + 1 if i else 0
        )
        before = range(first_before, w.start_us // 1_000_000)  # whole seconds before the start
        baseline = sum(per_second.get(s, 0) for s in before) / len(before) if before else 0.0
        until = ordered[i + 1].start_us // 1_000_000 - 1 if i + 1 < len(ordered) else last
        after = range(w.end_us // 1_000_000, min(until, last) + 1)
        if baseline <= 0 or not after:
            continue
        back = next((s for s in after if per_second.get(s, 0) >= RECOVERED * baseline), after[-1] + 1)
        seconds = max(0.0, (back * 1_000_000 - w.end_us) / 1e6)
        slowest = seconds if slowest is None else max(slowest, seconds)
    return None if slowest is None else round(slowest, 3)

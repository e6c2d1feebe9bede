"""Latency across hosts, corrected by the clock offsets the coordinator measured.

A receiver's latency is its arrival time (its clock) minus the sender's intended time (the
sender's clock), so it carries the difference of the two clocks: measured = true + (o_r - o_s),
with o the peer's offset from the coordinator's clock (PING, before and after the run, ± half
the round trip). Where a receiver's senders run on other hosts, its latencies are shifted by
o_s - o_r, and the shift's uncertainty is reported beside it: the error bar the figures carry.
On one host there is one clock, and nothing is shifted (a measured offset there is only noise).

The one rule, used by the reports (over test.json) and by the coordinator (over the clocks
measured before the load, for the receivers' own latency bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Correction", "clock_corrections"]


@dataclass(frozen=True)
class Correction:
    shift_us: float  # added to the receiver's measured latencies
    uncertainty_us: float  # ± on every corrected latency of this receiver
    reason: str = ""


def _offset(peer: dict[str, Any]) -> tuple[float, float] | None:
    """The peer's clock offset (µs) and its uncertainty, from the samples before and after."""
    clock = peer.get("clock") or {}
    samples = [clock[k] for k in ("before", "after") if clock.get(k)]
    if not samples:
        return None
    offsets = [s["offset_us"] for s in samples]
    drift = (max(offsets) - min(offsets)) / 2  # how far the clock moved during the run
    return sum(offsets) / len(offsets), max(s["uncertainty_us"] for s in samples) + drift


def clock_corrections(record: dict[str, Any]) -> dict[str, Correction]:
    """Receiver name -> its correction, for receivers whose senders all run on other hosts."""
    peers = record.get("peers", [])
    senders = [p for p in peers if p.get("role") == "sender"]
    corrections = {}
    for receiver in (p for p in peers if p.get("role") == "receiver"):
        if not senders or any(s.get("host") == receiver.get("host") for s in senders):
            continue  # one clock (or a mix, which a per-receiver shift cannot untangle): as measured
        mine = _offset(receiver)
        theirs = [_offset(s) for s in senders]
        if mine is None or any(t is None for t in theirs):
            continue
        known = [t for t in theirs if t is not None]
        offsets = [o for o, _ in known]
        spread = (max(offsets) - min(offsets)) / 2  # senders on several hosts: their mean, widened
        shift = sum(offsets) / len(offsets) - mine[0]
        uncertainty = mine[1] + max(u for _, u in known) + spread
        hosts = ", ".join(sorted({str(s.get("host")) for s in senders}))
        corrections[str(receiver.get("name"))] = Correction(
            shift, uncertainty, f"receiver on {receiver.get('host')}, senders on {hosts}"
        )
    return corrections

"""A finished test: its outcome and figures (`TestResult`), and the records test.json holds."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from coordinator.definitions import FixedRateTest, TestDefinition, to_dict
from coordinator.registry import PeerInfo

__all__ = [
    "TestResult",
    "loss_verdict",
    "new_test_id",
    "now_iso",
    "parent_record",
    "peer_record",
    "phase_record",
    "phase_row",
]


def new_test_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class TestResult:
    test_id: str
    outcome: str  # "success" | "failure"
    reason: str | None
    summary: dict[str, Any]
    record: dict[str, Any]  # what test.json holds
    data_server: str
    steps: list[TestResult] = field(default_factory=list)  # an incremental test's phases
    best: TestResult | None = None  # its highest passing step

    __test__ = False  # not a pytest class

    @property
    def passed(self) -> bool:
        return self.outcome == "success"

    @property
    def url(self) -> str:
        return f"{self.data_server}/api/results/{self.test_id}"

    def __str__(self) -> str:
        s = self.summary
        text = f"test {self.test_id}: {self.outcome}" + (f" ({self.reason})" if self.reason else "")
        if "sent" in s:
            lat = s.get("latency_us", {})
            send, receive = s["send_rate"]["mean"], s["receive_rate"]["mean"]
            text += (
                f"\n  sent {s['sent']:,}  received {s['received']:,}  lost {s['lost']:,}"
                f"  duplicates {s['duplicates']:,}"
                + (f"  (the SUT skipped {s['skipped_by_sut']:,})" if s.get("skipped_by_sut") else "")
                + f"\n  send rate {send:,.1f} msg/s  receive rate {receive:,.1f} msg/s"
                f"\n  latency p50 {lat.get('p50', 0) / 1000:.3f} ms  p99 {lat.get('p99', 0) / 1000:.3f} ms"
                f"  max {lat.get('max', 0) / 1000:.3f} ms"
            )
        if rr := s.get("request_reply"):
            response, law = rr["response_time_us"], rr["littles_law"]
            text += (
                f"\n  closed system: {rr['requests']:,} requests, {rr['replies']:,} replies,"
                f" {rr['timed_out']:,} timed out, {rr['late']:,} late; {rr['throughput_per_s']:,.1f} requests/s"
                f"\n  response time p50 {response['p50'] / 1000:.3f} ms  p99 {response['p99'] / 1000:.3f} ms"
                f"  (request leg p50 {rr['request_leg_us']['p50'] / 1000:.3f} ms, replier"
                f" {rr['replier_us']['p50'] / 1000:.3f} ms, reply leg {rr['reply_leg_us']['p50'] / 1000:.3f} ms"
                + (f", legs ± {rr['legs_uncertainty_us'] / 1000:.3f} ms" if rr.get("legs_uncertainty_us") else "")
                + ")"
                f"\n  Little's law: {law['clients']:g} waiting ≈ throughput x time {law['throughput_x_time']:.2f}"
                f" ({law['deviation_percent']:+.1f} %)"
            )
        best = self.record.get("max_sustainable")
        if best:
            text += (
                f"\n  max sustainable: {best['rate_per_client']:g} msg/s per client x {best['parallel']} clients"
                f" (received {best['receive_rate'] or 0:,.1f} msg/s; {best['test_id']})"
            )
        for name, e in self.record.get("statistics", {}).items():
            text += f"\n  {name}: mean {e['mean']:,.1f}, 95% CI [{e['ci95'][0]:,.1f}, {e['ci95'][1]:,.1f}] (n={e['n']})"
        for row in self.record.get("comparison", []):
            point = ", ".join(f"{k}={v}" for k, v in row["point"].items())
            p99 = (row["latency_us"] or {}).get("p99", 0) / 1000
            text += f"\n  {point}: {row['outcome']}, {row['receive_rate'] or 0:,.1f} msg/s, p99 {p99:.3f} ms"
        return text


def phase_record(test: FixedRateTest, test_id: str, outcome: str, reason: str | None, **facts: Any) -> dict[str, Any]:
    """test.json of one phase: what ran and how it ended, then `facts` as the phase gathered them
    (started, ended, failed_at, peers, collection, events, notes, control_outages, summary)."""
    return {
        "test_id": test_id,
        "name": test.name,
        "kind": "unbounded" if test.KIND == "fixed-rate" and not test.rate else test.KIND,
        "definition": to_dict(test),
        "target_rate": test.target_rate(),
        "labels": test.labels,
        "outcome": outcome,
        "reason": reason,
        **facts,
    }


def peer_record(p: PeerInfo, clock: dict[str, Any]) -> dict[str, Any]:
    """A peer as test.json lists it, with its clock samples (protocol.clock_correction reads
    them so)."""
    return {
        "name": p.name,
        "host": p.host,
        "role": p.role.value,
        "peer_id": p.peer_id,
        "version": p.version,
        "clock": clock,
    }


def parent_record(test: TestDefinition, test_id: str, started: str, outcome: str, reason: str | None) -> dict[str, Any]:
    """test.json of a test made of several phases; each phase has its own beside it."""
    return {
        "test_id": test_id,
        "name": test.name,
        "kind": test.KIND,
        "definition": to_dict(test),
        "labels": test.labels,
        "started": started,
        "ended": now_iso(),
        "outcome": outcome,
        "reason": reason,
    }


def phase_row(result: TestResult) -> dict[str, Any]:
    """One phase in its parent's test.json."""
    d = result.record["definition"]
    return {
        "test_id": result.test_id,
        "rate_per_client": d["rate"],
        "parallel": d["parallel"],
        "target_rate": result.record["target_rate"],
        "outcome": result.outcome,
        "reason": result.reason,
        "send_rate": result.summary.get("send_rate", {}).get("mean"),
        "receive_rate": result.summary.get("receive_rate", {}).get("mean"),
        "latency_us": result.summary.get("latency_us"),
        "lost": result.summary.get("lost"),
        **_closed_system_row(result.summary.get("request_reply")),
    }


def _closed_system_row(rr: dict[str, Any] | None) -> dict[str, Any]:
    """A request/reply phase's figures for its series: the closed system's curves."""
    if not rr:
        return {}
    return {
        "throughput_per_s": rr["throughput_per_s"],
        "response_time_us": rr["response_time_us"],
        "timed_out": rr["timed_out"],
    }


def outages_between(outages: list[tuple[int, int]], started: str, ended: str) -> list[dict[str, Any]]:
    """The coordinator's control-broker outages (wall ns, lost and back; back 0 while down) that
    overlap a test, as test.json keeps them and the report draws them."""
    start_ns = int(datetime.fromisoformat(started).timestamp() * 1e9)
    end_ns = int(datetime.fromisoformat(ended).timestamp() * 1e9)
    rows = []
    for lost_ns, back_ns in outages:
        if lost_ns <= end_ns and (back_ns == 0 or back_ns >= start_ns):
            rows.append(
                {
                    "lost": datetime.fromtimestamp(lost_ns / 1e9, UTC).isoformat(timespec="milliseconds"),
                    "back": datetime.fromtimestamp(back_ns / 1e9, UTC).isoformat(timespec="milliseconds")
                    if back_ns
                    else None,
                    "seconds": round((back_ns - lost_ns) / 1e9, 3) if back_ns else None,
                }
            )
    return rows


def loss_verdict(summary: dict[str, Any], max_loss_ratio: float) -> str | None:
    """Why the figures fail a test on their own (none, nothing sent, too much lost), or None."""
    if "error" in summary:
        return f"no figures: {summary['error']}"
    sent, lost = summary["sent"], summary["lost"]
    if sent == 0:
        return "nothing was sent"
    if lost / sent > max_loss_ratio:
        return f"lost {lost:,} of {sent:,} messages ({lost / sent:.3%}; bound {max_loss_ratio:.3%})"
    # A request without its reply in time is lost to its requester, whatever reached the replier.
    if rr := summary.get("request_reply"):
        unanswered = rr["timed_out"]
        if unanswered / sent > max_loss_ratio:
            return (
                f"{unanswered:,} of {sent:,} requests timed out ({unanswered / sent:.3%}; bound {max_loss_ratio:.3%})"
            )
    return None

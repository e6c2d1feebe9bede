"""A finished test: its outcome and figures (`TestResult`), and the records test.json holds."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from coordinator.definitions import FixedRateTest, TestDefinition, to_dict, workload
from coordinator.registry import PeerInfo
from protocol.clock_correction import untrusted_latency
from protocol.figures import (
    Accounting,
    AccountingRow,
    AddressCounters,
    QueueCounters,
    SutCounters,
    TestFigures,
    TopicCounters,
)
from protocol.options import megabytes_per_s
from protocol.sut_url import SutUrlError, parse_sut_url
from protocol.test_record import Estimate, Outage, PeerClock, PeerEntry, PhaseRow, ReplyRow, TestRecord

__all__ = [
    "TestResult",
    "Verdict",
    "accounting_verdict",
    "generator_shortfall",
    "held",
    "judge",
    "latency_line",
    "loss_verdict",
    "new_test_id",
    "now_iso",
    "outages_between",
    "parent_record",
    "peer_record",
    "phase_record",
    "phase_row",
    "short_of_target",
]


def new_test_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class TestResult:
    test_id: str
    outcome: str  # "success" | "failure" | "invalid" (it did not measure the SUT: `reason` says why)
    reason: str | None
    summary: TestFigures
    record: TestRecord  # what test.json holds
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

    def _stands_for(self) -> str:
        """Which phase a series' headline figures are, and why that one."""
        if self.best is None:
            return f"{self.steps[-1].test_id}, the last phase"
        why = {
            "repeated": "the repetition nearest the mean rate",
            "sweep": "the point with the highest receive rate",
        }.get(self.record.kind, "the highest passing step")
        return f"{self.best.test_id}, {why}"

    def __str__(self) -> str:
        s = self.summary
        text = f"test {self.test_id}: {self.outcome}" + (f" ({self.reason})" if self.reason else "")
        # A sender that was its own limit is said beside the outcome, as the report and the history
        # say it: within the shortfall bound (or with no target rate) the run is no failure, but
        # its rates are the generator's, and a bare "success" read as the SUT's.
        for why in (p.generator_bound for p in s.peers if p.generator_bound):
            if why not in (self.reason or ""):
                text += f"\n  generator-bound: {why}"
        rr = s.request_reply
        if rr:  # a closed system leads with its response time; its legs are in it, not a "latency"
            response, law = rr.response_time_us, rr.littles_law
            if rr.replies:
                text += (
                    f"\n  response time p50 {response.p50 / 1000:.3f} ms  p99 {response.p99 / 1000:.3f} ms"
                    f"  (request leg p50 {rr.request_leg_us.p50 / 1000:.3f} ms, replier"
                    f" {rr.replier_us.p50 / 1000:.3f} ms, reply leg {rr.reply_leg_us.p50 / 1000:.3f} ms"
                    + (f", legs ± {rr.legs_uncertainty_us / 1000:.3f} ms" if rr.legs_uncertainty_us else "")
                    + ")"
                )
            else:  # no response time at all, not one of 0 ms; nor a Little's law to check
                text += "\n  response time: none (no reply came in time)"
            text += (
                f"\n  closed system: {rr.requests:,} requests, {rr.replies:,} replies,"
                f" {rr.timed_out:,} timed out, {rr.late:,} late; {rr.throughput_per_s:,.1f} requests/s"
            )
            if rr.replies:
                text += (
                    f"\n  Little's law: {law.clients:g} waiting ≈ throughput x time {law.throughput_x_time:.2f}"
                    f" ({law.deviation_percent:+.1f} %)"
                )
        if s.error is None:
            size = self.record.message_size
            if self.steps:  # a series: its figures are one phase's, which says so
                text += f"\n  figures of {self._stands_for()}:"
            text += (
                f"\n  sent {s.sent:,}  received {s.received:,}  lost {s.lost:,}  duplicates {s.duplicates:,}"
                + (f"  (the SUT skipped {s.skipped_by_sut:,})" if s.skipped_by_sut else "")
                + f"\n  send rate {_rate(s.send_rate.of(s.sent), size)}"
                + f"  receive rate {_rate(s.receive_rate.of(s.received), size)}"
                + ("" if rr else f"\n  {latency_line(s)}")
            )
            # What the figures cannot say themselves (Nagle's mark, a SUT that held the senders
            # back): the report shows them under its outcome, and the console as well.
            text += "".join(f"\n  hint: {hint}" for hint in s.hints_all)
        best = self.record.max_sustainable
        if best:
            text += (
                f"\n  max sustainable: {best.rate_per_client or 0:g} msg/s per client x {best.parallel} clients"
                f" (received {best.receive_rate or 0:,.1f} msg/s; {best.test_id})"
            )
        for name, e in (self.record.statistics or {}).items():
            text += f"\n  {_estimate_line(name, e, self.record.message_size)}"
        for row in self.record.comparison or ():
            point = ", ".join(f"{k}={v}" for k, v in (row.point or {}).items())
            p99 = (row.latency_us.p99 if row.latency_us else 0) / 1000
            text += f"\n  {point}: {row.outcome}, {row.receive_rate or 0:,.1f} msg/s, p99 {p99:.3f} ms"
        return text


def _estimate_line(name: str, e: Estimate, size: object = None) -> str:
    """A repeated test's figure as its mean and 95 % interval: times in ms, rates per second,
    a message rate's mean in MB/s beside it where the size is known."""
    (low, high), label = e.ci95, name.removesuffix("_us").replace("_", " ")
    if name.endswith("_us"):
        return f"{label}: mean {e.mean / 1000:,.3f} ms, 95% CI [{low / 1000:,.3f}, {high / 1000:,.3f}] ms (n={e.n})"
    if name == "throughput":
        return f"{label}: mean {e.mean:,.1f} requests/s, 95% CI [{low:,.1f}, {high:,.1f}] requests/s (n={e.n})"
    return f"{label}: mean {_rate(e.mean, size)}, 95% CI [{low:,.1f}, {high:,.1f}] msg/s (n={e.n})"


def _rate(per_s: float | None, size: object) -> str:
    """msg/s, and MB/s beside it where the message size is known (1 MB = 10^6 B, as PerfTest's;
    a range of sizes by its mean); none where the run had no window after its warm-up."""
    if per_s is None:
        return "none (no message after the warm-up)"
    mb = f" ({megabytes:,.2f} MB/s)" if (megabytes := megabytes_per_s(per_s, size)) is not None else ""
    return f"{per_s:,.1f} msg/s{mb}"


def latency_line(summary: TestFigures) -> str:
    """The latency as a person reads it: the figures with their clock ± where they crossed
    hosts, or why there is no figure (a clamped or unknown latency is never printed as one)."""
    if why := summary.latency_untrusted:
        return f"latency: no figure ({why})"
    if not summary.latency_samples:
        return "latency: no samples"
    lat, uncertainty = summary.latency_us, summary.latency_uncertainty_us
    return f"latency p50 {lat.p50 / 1000:.3f} ms  p99 {lat.p99 / 1000:.3f} ms  max {lat.max / 1000:.3f} ms" + (
        f"  (± {uncertainty / 1000:.3f} ms: clocks across hosts)" if uncertainty else ""
    )


def phase_record(test: FixedRateTest, test_id: str, outcome: str | None, reason: str | None) -> TestRecord:
    """test.json of one phase: what ran and how it ended (no outcome while it runs). The phase
    adds the facts it gathered (started, ended, failed_at, peers, collection, events, notes,
    control_outages, summary) with `dataclasses.replace`."""
    return TestRecord(
        test_id=test_id,
        name=test.name,
        kind="unbounded" if test.KIND == "fixed-rate" and not test.rate else test.KIND,
        definition=to_dict(test),
        workload=workload(test),
        target_rate=test.target_rate(),
        labels=test.labels,
        outcome=outcome,
        reason=reason,
    )


def peer_record(p: PeerInfo, clock: PeerClock) -> PeerEntry:
    """A peer as test.json lists it, with its clock samples (protocol.clock_correction reads
    them so)."""
    return PeerEntry(name=p.name, host=p.host, role=p.role.value, peer_id=p.peer_id, version=p.version, clock=clock)


def parent_record(
    test: TestDefinition, test_id: str, started: str, outcome: str | None, reason: str | None
) -> TestRecord:
    """test.json of a test made of several phases; each phase has its own beside it."""
    return TestRecord(
        test_id=test_id,
        name=test.name,
        kind=test.KIND,
        definition=to_dict(test),
        workload=workload(test),
        labels=test.labels,
        started=started,
        ended=now_iso() if outcome is not None else None,  # an opening record: still running
        outcome=outcome,
        reason=reason,
    )


def phase_row(result: TestResult) -> PhaseRow:
    """One phase in its parent's test.json."""
    d = result.record.definition
    figures = result.summary
    row = PhaseRow(
        test_id=result.test_id,
        rate_per_client=d["rate"],
        parallel=d["parallel"],
        target_rate=result.record.target_rate,
        outcome=result.outcome,
        reason=result.reason,
    )
    if figures.error is not None:  # none where it has none
        return row
    rr = figures.request_reply
    return replace(
        row,
        send_rate=figures.send_rate.mean,
        receive_rate=figures.receive_rate.mean,
        # No figure where there is none: a phase that failed before a message came back read p50 0.
        latency_us=None if figures.latency_untrusted or not figures.latency_samples else figures.latency_us,
        lost=figures.lost,
        # a request/reply phase's closed-system curves
        reply=None if rr is None else ReplyRow(rr.throughput_per_s, rr.response_time_us, rr.timed_out),
    )


def outages_between(outages: list[tuple[int, int]], started: str, ended: str) -> tuple[Outage, ...]:
    """The coordinator's control-broker outages (wall ns, lost and back; back 0 while down) that
    overlap a test, as test.json keeps them and the report draws them."""
    start_ns = int(datetime.fromisoformat(started).timestamp() * 1e9)
    end_ns = int(datetime.fromisoformat(ended).timestamp() * 1e9)
    return tuple(
        Outage(
            lost=datetime.fromtimestamp(lost_ns / 1e9, UTC).isoformat(timespec="milliseconds"),
            back=datetime.fromtimestamp(back_ns / 1e9, UTC).isoformat(timespec="milliseconds") if back_ns else None,
            seconds=round((back_ns - lost_ns) / 1e9, 3) if back_ns else None,
        )
        for lost_ns, back_ns in outages
        if lost_ns <= end_ns and (back_ns == 0 or back_ns >= start_ns)
    )


@dataclass(frozen=True)
class Verdict:
    """How a phase ended, from the figures: `failure` (the SUT did not do what the test asks:
    lost messages, timed-out requests, a latency bound where the user made an untrusted latency
    one), else `invalid` (the run did not measure the SUT: each reason says why), else success."""

    failure: str | None = None
    invalid: tuple[str, ...] = ()
    latency_untrusted: str | None = None  # why the latency is no figure


def judge(summary: TestFigures, test: FixedRateTest) -> Verdict:
    """The figures' verdict on a phase, with why its latency is no figure (or None)."""
    fail = test.fail
    failure = loss_verdict(summary, fail.max_loss_ratio)
    if summary.error is not None:
        return Verdict(failure)
    dropped, unreconciled = accounting_verdict(summary.accounting, fail.max_loss_ratio)
    failure = dropped or failure  # the same loss, told as what the SUT broke
    untrusted = untrusted_latency(summary, fail.latency_uncertainty_ratio)
    invalid: list[str] = []
    if untrusted and fail.untrusted_latency == "failure":
        failure = failure or untrusted
    elif untrusted and fail.untrusted_latency == "invalid":
        invalid.append(untrusted)
    invalid += unreconciled
    invalid += generator_shortfall(summary, test.target_rate(), fail.max_generator_shortfall)
    invalid += copies_of_everything(summary)
    invalid += [why for p in summary.peers for why in p.inspector_shortfall if "no sample" in why]
    return Verdict(failure, tuple(invalid), untrusted)


def percent(ratio: float) -> str:
    """A share as people read it, to 3 significant digits: 0%, 3%, 12.5%, 0.0001% (one message
    of a million read "0.000%", as if none were lost)."""
    if ratio == 0:
        return "0%"
    digits = max(0, 2 - math.floor(math.log10(abs(ratio) * 100)))
    text = f"{ratio * 100:.{digits}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


def held(summary: TestFigures, test: FixedRateTest) -> str:
    """Why a phase is a success, said beside the word: what was checked and held. A bare
    "success" above a generator-bound warning read as the SUT's success."""
    fail, sent = test.fail, summary.sent
    said = []
    if rr := summary.request_reply:
        said.append(
            f"all {rr.requests:,} requests had their reply in time"
            if not rr.timed_out
            else f"{rr.timed_out:,} of {rr.requests:,} requests timed out, "
            f"within the {percent(fail.max_loss_ratio)} allowed"
        )
    elif summary.lost:
        said.append(f"lost {summary.lost:,} of {sent:,}, within the {percent(fail.max_loss_ratio)} allowed")
    else:
        said.append(f"all {sent:,} messages arrived")
    if summary.duplicates:
        said.append(f"{summary.duplicates:,} duplicates")
    if fail.latency_ms:
        at = "max" if fail.latency_policy == "hard" else f"p{fail.latency_percentile:g}"
        said.append(f"latency {at} within {fail.latency_ms:g} ms in every second")
    if fail.min_rate_ratio:
        said.append(f"every sender at {fail.min_rate_ratio:.0%} of its target rate or more")
    target, rate = test.target_rate(), summary.send_rate.of(sent)
    if target and rate is not None and not test.profile:
        said.append(f"sent {rate / target:.0%} of the {target:,.6g} msg/s asked")
    if any(p.generator_bound for p in summary.peers):
        said.append(f"but the load generator was its own limit (within the {fail.max_generator_shortfall:.0%} allowed)")
    if summary.latency_untrusted:
        said.append("but its latency is no figure")
    return "; ".join(said)


# Duplicates of at least this share of the messages received: every message came again, which is
# a test reading each message with several clients (a stream, a topic), not a SUT's redelivery.
_COPIES_RATIO = 0.9


def copies_of_everything(summary: TestFigures) -> list[str]:
    """Why the run measured something else than one delivery per message: (nearly) every message
    arrived more than once. The counts stay right (duplicates are counted by sequence number), but
    the receive rate and the latency count each copy."""
    received, duplicates = summary.received, summary.duplicates
    if not received or duplicates < _COPIES_RATIO * received:
        return []
    return [
        f"every message arrived {(received + duplicates) / received:.1f} times on average ({duplicates:,} duplicates "
        f"of {received:,} received): receiving clients that each read every message (a stream or a topic read by "
        "several: give each its own with %d), or a SUT that delivered everything again; the receive rate and "
        "the latency count each copy"
    ]


def short_of_target(sent_per_s: float, target_per_s: float, bound: float) -> bool:
    """Whether senders that sent `sent_per_s` fell more than `bound` (a fraction) short of a
    target; never where there is none (unbounded, or a closed system)."""
    return bool(target_per_s) and sent_per_s < (1 - bound) * target_per_s


def generator_shortfall(summary: TestFigures, target_per_s: float, bound: float) -> list[str]:
    """Why the run measured its load generator: its senders were the limit (their CPU or event
    loop, `generator_bound` on their rows) and sent more than `bound` short of the target."""
    sent = summary.send_rate.mean
    if not short_of_target(sent, target_per_s, bound):
        return []
    bound_by = [p.generator_bound for p in summary.peers if p.generator_bound]
    if not bound_by:
        return []  # short by the SUT's doing (its window, its back-pressure): a figure of it
    return [
        f"the load generator was the limit: its senders sent {sent:,.1f} msg/s of the {target_per_s:,.1f} asked "
        f"({sent / target_per_s:.0%}; bound {1 - bound:.0%}): {bound_by[0]}"
    ]


def accounting_verdict(accounting: Accounting, max_loss_ratio: float) -> tuple[str | None, list[str]]:
    """The three counts against the delivery guarantee, sender by sender (reports.accounting):
    why the SUT failed (it acknowledged messages and never delivered them, more than
    `max_loss_ratio` of them), and why the counts cannot be reconciled at all (more received than
    sent: the tool's count, not the SUT, is wrong). At most once (nothing acknowledged) may drop,
    and duplicates are at least once's right: neither is judged here. A Kafka topic whose own
    counters show it still holds every message it took did not drop what the receivers missed:
    that loss is the loss bound's to judge (loss_verdict), not the SUT's breach."""
    counters = accounting.sut_counters
    dropped, unreconciled = [], []
    for row in accounting.per_sender:
        sender, sent, accepted, received = row.sender, row.sent, row.accepted, row.received
        if received > sent:
            unreconciled.append(
                f"sender {sender}: {received:,} of its messages were received but it sent {sent:,}: "
                "the counts cannot be reconciled"
            )
        elif accepted is not None and accepted - received > max_loss_ratio * accepted:
            topic = _topic_counters(row.topic, counters)
            if topic is not None and not topic.deleted:
                continue
            # Messages the SUT did not acknowledge may have arrived all the same, and hide as many
            # acknowledged ones that did not: exact only where it acknowledged all it was sent.
            at_least = "" if accepted == sent else "at least "
            dropped.append(
                f"sender {sender}: the SUT ({row.sut}) accepted {accepted:,} messages and delivered "
                f"{received:,}: it dropped {at_least}{accepted - received:,} it had acknowledged"
                + _sut_agrees(row, accounting.per_sender, counters)
            )
    failure = None
    if dropped:
        failure = dropped[0] + (f" (and {len(dropped) - 1} more senders)" if len(dropped) > 1 else "")
    return failure, unreconciled[:1]


def _topic_counters(topic: str | None, counters: Sequence[SutCounters]) -> TopicCounters | None:
    """The Kafka topic's own counters, where they had caught up with ours when read."""
    return next((c for c in counters if isinstance(c, TopicCounters) and c.topic == topic and c.caught_up), None)


def _sut_agrees(row: AccountingRow, rows: Sequence[AccountingRow], counters: Sequence[SutCounters]) -> str:
    """The SUT's own counters of the sender's queue or topic where they show drops and had
    caught up with ours when read (reports.accounting): a witness. A topic witnesses where it
    deleted some of what it took and no longer holds as many as its senders' receivers missed."""
    if (router := _address_counters(row.sut, counters)) is not None:
        return _router_says(router, rows)
    if (topic := _topic_counters(row.topic, counters)) is not None:
        ours = [r for r in rows if r.topic == topic.topic and r.accepted is not None]
        missed = sum((r.accepted or 0) - r.received for r in ours)
        if not topic.deleted or missed <= topic.kept:
            return ""
        return (
            f"; its own counters agree: topic {topic.topic} took {topic.took:,}, kept {topic.kept:,}"
            f" and deleted {topic.deleted:,} (its low watermark moved past them)"
        )
    seen = [c for c in counters if isinstance(c, QueueCounters) and c.queue == row.queue and c.dropped and c.caught_up]
    return "".join(
        f"; its own counters agree: queue {c.queue} took {c.published:,}, delivered {c.delivered:,},"
        f" held {c.left:,}"
        + (f" ({c.left_before:,} before the test)" if c.left_before else "")
        + f" and dropped {c.dropped:,}"
        for c in seen[:1]
    )


def _address_counters(sut: str | None, counters: Sequence[SutCounters]) -> AddressCounters | None:
    """A router's counters of the address an AMQP 1.0 sender sent to, where they had caught up
    with ours when read."""
    address = _address_of(sut)
    return next((c for c in counters if isinstance(c, AddressCounters) and c.address == address and c.caught_up), None)


def _address_of(url: str | None) -> str | None:
    """The address of an AMQP 1.0 SUT URL, as reports.accounting names a router's counters."""
    try:
        endpoint = parse_sut_url(url) if url is not None else None
    except SutUrlError:
        return None
    return endpoint.destination if endpoint is not None and endpoint.scheme in ("amqp10", "amqp10s") else None


def _router_says(router: AddressCounters, rows: Sequence[AccountingRow]) -> str:
    """What a router's counters of the sender's address say of what the receivers missed, as a
    queue's do (_sut_agrees). A router keeps nothing: it acknowledges a delivery when a consumer
    accepts it, so its acknowledging more than its consumers accepted is its drop, and a witness.
    Where they accepted more than the test's receivers got, it passed the missing ones on, to a
    consumer outside the test (seen with Qpid Dispatch Router 1.19.0: a second consumer on the
    address took 109 of 1,000) or to receivers that lost them: that is said too."""
    address, took = router.address, router.took
    if router.dropped:
        return (
            f"; its own counters agree: address {address} took {took:,}, delivered {router.delivered:,},"
            f" released {router.released:,}, modified {router.modified:,} and acknowledged"
            f" {router.dropped:,} that no consumer accepted"
        )
    got = sum(r.received for r in rows if _address_of(r.sut) == address)
    if router.consumers_accepted <= got:
        return ""
    return (
        f"; the router's own counters say it passed them on: address {address} took {took:,} and its"
        f" {router.links_out} consumer links accepted {router.consumers_accepted:,},"
        f" {router.consumers_accepted - got:,} more than the test's receivers got"
    )


def loss_verdict(summary: TestFigures, max_loss_ratio: float) -> str | None:
    """Why the figures fail a test on their own (none, nothing sent, too much lost), or None."""
    if summary.error is not None:
        return f"no figures: {summary.error}"
    sent, lost = summary.sent, summary.lost
    if sent == 0:
        return "nothing was sent"
    if lost / sent > max_loss_ratio:
        return f"lost {lost:,} of {sent:,} messages ({percent(lost / sent)}; bound {percent(max_loss_ratio)})"
    # A request without its reply in time is lost to its requester, whatever reached the replier.
    if rr := summary.request_reply:
        unanswered = rr.timed_out
        if unanswered / sent > max_loss_ratio:
            return (
                f"{unanswered:,} of {sent:,} requests timed out ({percent(unanswered / sent)}; "
                f"bound {percent(max_loss_ratio)})"
            )
    return None

"""The figures of one collected test, merged from the peers' own pieces: exact counts, rates over
whole seconds from each writer's counts by second (protocol.ratefile.RatePiece), and latency
percentiles from the merged HDR interval histograms. No row is read where a piece covers it, so
the time this takes grows with the test's seconds, not its messages.

This is the one place that turns a test folder into the `summary.json` keys DESIGN.md fixes.
Counts cover the whole test (a message lost during warm-up is still lost); rates and latency
leave the warm-up out. Rates cut it at the first whole second after the senders' warm-up end
(the pieces hold whole seconds), latency at the first interval that starts after it.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.figures import (
    LittlesLaw,
    PeerFigures,
    Percentiles,
    Rate,
    RequestReplyFigures,
    SenderFigures,
    TestFigures,
    TimeFigures,
)
from protocol.file_check import DamagedFileError, verify_file
from protocol.hdr import new_histogram, read_intervals, read_total
from protocol.live import BUSY_CPU_PERCENT, BUSY_LOOP_LAG_MS
from protocol.ratefile import PIECE_SUFFIX, RatePiece, RateSeconds, rate_seconds, whole_second_at_or_after
from protocol.results import (
    ClientSent,
    PeerRecord,
    ReceiverAccount,
    SelfMonitorSummary,
    SenderAccount,
    read_peer_json,
    read_sequences,
)
from protocol.sequences import merge_bitsets
from protocol.test_record import TestRecord
from reports.accounting import accounting, sut_counters, sut_of
from reports.clocks import Correction, clock_corrections, left_to_shift, shifted
from reports.fault_windows import recovery_after_faults, windows_from_events

log = logging.getLogger(__name__)

__all__ = [
    "Peers",
    "generator_bound",
    "inspector_shortfalls",
    "rate_of",
    "read_peers",
    "read_test_record",
    "receive_seconds",
    "summarize",
]

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
# The points of the whole-test percentile distribution (the report's HDR-style plot).
DISTRIBUTION = (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100)


Peers = list[tuple[Path, PeerRecord]]  # each peer's folder and its peer.json


def read_peers(test_dir: Path) -> Peers:
    """Every peer.json of a test folder, with the folder it describes, once every file a peer
    recorded is as it wrote it: else a DamagedFileError naming the first that is not, and what it
    lacks (a figure from part of a file is no figure)."""
    found = sorted(test_dir.glob("*/*/peer.json"))
    # A link below the test folder may lead anywhere (reports.paths): its peer is not read.
    found = [path for path in found if not any(p.is_symlink() for p in (path, path.parent, path.parent.parent))]
    peers = [(path.parent, read_peer_json(path)) for path in found]
    damaged = []
    for directory, record in peers:
        for name, check in (record.checks or {}).items():
            try:
                verify_file(directory / name, check, f"{record.role} {record.name}")
            except DamagedFileError as exc:
                damaged.append(str(exc))
    if damaged:
        more = f" (and {len(damaged) - 1} more damaged files)" if len(damaged) > 1 else ""
        raise DamagedFileError(damaged[0] + more)
    return peers


def _senders(peers: Peers) -> list[tuple[Path, PeerRecord, SenderAccount]]:
    return [(d, p, p.sender) for d, p in peers if p.sender is not None]


def _receivers(peers: Peers) -> list[tuple[Path, PeerRecord, ReceiverAccount]]:
    return [(d, p, p.receiver) for d, p in peers if p.receiver is not None]


def read_test_record(test_dir: Path, *, dir_fd: int | None = None) -> TestRecord | None:
    """The coordinator's record of a test (test.json); None while there is none (or it is
    unreadable, or a symbolic link, which may lead anywhere: reports.paths). `dir_fd`: the test
    folder, opened already (reports.paths.open_folder), which `test_dir` is then not read through."""
    where = "test.json" if dir_fd is not None else test_dir / "test.json"
    try:
        with os.fdopen(os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd), "rb") as f:
            text = f.read()
    except OSError:
        return None
    try:
        return TestRecord.from_text(text)
    except ValueError as exc:  # being written, or damaged: whoever reads it leaves the test out, saying so
        log.warning("test %s left out: its test.json is no test's record: %s", test_dir.name, exc)
        return None


def rate_of(buckets: Counter[int], cut_s: int | None = None, span_s: float | None = None) -> Rate:
    """Messages per whole second from counts by second. The first and last seconds are partial
    and left out when there are whole ones between them; but a first second that starts at the
    warm-up's cut (`cut_s`: the counts hold what came from it on) is whole when a later one
    follows it. Left out, a 4 s run with 2 s of warm-up kept one whole second and a part, and
    read 70 msg/s where 50 went. With no whole second, the count over the time it took
    (`span_s`), where known: 8 requests in the 0.18 s a failed run had after its warm-up read
    8 a second."""
    if not buckets:
        return Rate()
    first, last = min(buckets), max(buckets)
    whole = [buckets.get(s, 0) for s in range(first if first == cut_s and last > first else first + 1, last)]
    if not whole:
        total = sum(buckets.values())
        # From a cut, n messages in the time since it; from the first message, n - 1 gaps.
        mean = float(total) if not span_s else (total if cut_s is not None else total - 1) / span_s
        return Rate(mean, mean, mean)
    return Rate(sum(whole) / len(whole), float(min(whole)), float(max(whole)))


def _rate_since(seconds: RateSeconds, cut_s: int | None) -> Rate:
    """`rate_of` a rate file's counts, with the time from the cut (or the first row) to the last
    row for a run with no whole second."""
    start = cut_s * 1_000_000 if cut_s is not None else seconds.first_ata_us
    end = seconds.last_ata_us
    span_s = (end - start) / 1e6 if start is not None and end is not None and end > start else None
    return rate_of(seconds.per_second, cut_s, span_s)


def summarize(test_dir: Path, peers: Peers | None = None, record: TestRecord | None = None) -> TestFigures:
    """`peers` and `record` (test.json): when the caller has read them already. Latency is
    corrected across hosts by the clock offsets test.json records (reports.clocks)."""
    peers = read_peers(test_dir) if peers is None else peers
    record = read_test_record(test_dir) if record is None else record
    corrections = clock_corrections(() if record is None else record.peers or ())
    senders, receivers = _senders(peers), _receivers(peers)
    # No warm-up: everything counts, including receivers' intervals begun before the senders.
    warm_up_end_us = max((a.warm_up_end_ns // 1000 for _, _, a in senders if a.warm_up_s > 0), default=0)
    cut_us = whole_second_at_or_after(warm_up_end_us)  # 0: no warm-up, nothing cut
    cut_s = cut_us // 1_000_000 or None  # the counts' first second, if cut

    sent_by_key: dict[str, int] = {}
    peer_of_key: dict[str, str] = {}
    streams: dict[str, ClientSent] = {}
    sut_of_key: dict[str, str | None] = {}
    clients: list[tuple[str | None, int]] = []  # each sending client's SUT URL and number
    sends = RateSeconds()
    for directory, peer, account in senders:
        sent_by_key |= {key: client.sent for key, client in account.senders.items()}
        peer_of_key |= {key: f"{peer.name}/{client.client}" for key, client in account.senders.items()}
        streams |= account.senders
        sut_of_key |= {key: sut_of(peer, client.client) for key, client in account.senders.items()}
        clients += [(sut_of(peer, client.client), client.client) for client in account.senders.values()]
        _add(sends, directory, peer.files, cut_us)

    bitsets: dict[str, list[bytes]] = {}
    deliveries: Counter[str] = Counter()
    out_of_order: Counter[str] = Counter()  # as each receiver saw its share of the sender's stream
    latency, clamped = _latency(receivers, corrections, warm_up_end_us)
    foreign: Counter[str] = Counter()
    skipped = 0
    for directory, _, got in receivers:
        foreign.update(got.foreign)
        skipped += got.skipped_by_sut
        for key, counts in got.per_sender.items():
            deliveries[key] += counts.deliveries
            out_of_order[key] += counts.out_of_order
        for key, bits in read_sequences(directory).items():
            bitsets.setdefault(key, []).append(bits)
    receives = receive_seconds(peers, cut_us)

    received = lost = duplicates = 0
    per_sender = []
    for key in sorted(sent_by_key.keys() | bitsets.keys()):
        merged = merge_bitsets(bitsets.get(key, []), deliveries[key])
        expected = sent_by_key.get(key, 0)
        key_lost = max(0, expected - merged.distinct)
        received += merged.distinct
        duplicates += merged.duplicates
        lost += key_lost
        stream = streams.get(key)
        per_sender.append(
            SenderFigures(
                sender=peer_of_key.get(key, key),
                key=key,
                sut=sut_of_key.get(key),
                intended=None if stream is None else stream.intended,
                expected=expected,
                accepted=None if stream is None else stream.accepted,
                received=merged.distinct,
                lost=key_lost,
                lost_percent=100 * key_lost / expected if expected else 0.0,
                duplicates=merged.duplicates,
                out_of_order=out_of_order[key],
            )
        )
    first_send = sends.first_ata_us
    end = max((x for x in (sends.last_ata_us, receives.last_ata_us) if x is not None), default=None)
    send_rate = _rate_since(sends, cut_s)  # a closed system's throughput too: a row per reply
    return TestFigures(
        test_id=test_dir.name,
        duration_s=(end - first_send) / 1e6 if first_send is not None and end is not None else 0.0,
        sent=sum(sent_by_key.values()),
        received=received,
        lost=lost,
        duplicates=duplicates,
        foreign=dict(foreign),
        skipped_by_sut=skipped,
        send_rate=send_rate,
        receive_rate=_rate_since(receives, cut_s),
        latency_us=Percentiles(**_percentiles(latency), max=float(latency.get_max_value())),
        latency_samples=latency.get_total_count(),
        latency_distribution_us=tuple((p, float(latency.get_value_at_percentile(p))) for p in DISTRIBUTION),
        per_sender=tuple(per_sender),
        accounting=accounting(per_sender, sut_counters(test_dir, clients)),
        peers=tuple(_peer_rows(peers, corrections)),
        latency_clamped_by_correction=clamped,
        hints=(*_nagle_hints({"latency": latency}), *_held_back_hints(peers)),
        latency_uncertainty_us=round(max((c.uncertainty_us for c in corrections.values()), default=0.0), 1),
        clock_problems=tuple(problem for c in corrections.values() for problem in c.problems),
        clock_paths=tuple(sorted({path for c in corrections.values() for path in c.path.split("+") if path})),
        load_model="closed" if any(a.request_reply for _, _, a in senders) else "open",
        request_reply=_request_reply(senders, warm_up_end_us, send_rate.mean, corrections),
        recovery_s=recovery_after_faults(receives.per_second, windows_from_events(record.events or ()))
        if record is not None
        else None,
    )


# The requester's logs (worker.requester.REQUESTER_LOGS) and the figures they become.
_REQUESTER_LOGS = {
    "response_time_us": "requester-response.hlog",
    "replier_us": "requester-replier.hlog",
    "request_leg_us": "requester-request-leg.hlog",
    "reply_leg_us": "requester-reply-leg.hlog",
}


def _request_reply(
    senders: list[tuple[Path, PeerRecord, SenderAccount]],
    warm_up_end_us: int,
    throughput: float,
    corrections: dict[str, Correction],
) -> RequestReplyFigures | None:
    """A closed system's figures, merged over its requesters: counts, throughput (the rate of
    their rate files, a row per request answered in time, by the reply's second), response time
    and its legs after warm-up, and Little's law as a check on them all. The legs cross from a
    requester's clock to a replier's and back: where the repliers run on other hosts they were
    corrected by the measured offsets (worker.requester), and `corrections` (the one-way rule,
    repliers being the receivers) gives their uncertainty."""
    requesters = [(d, a, a.request_reply) for d, _, a in senders if a.request_reply is not None]
    if not requesters:
        return None
    since_ms = warm_up_end_us // 1000
    counts: Counter[str] = Counter()
    foreign: Counter[str] = Counter()
    totals = {name: new_histogram() for name in _REQUESTER_LOGS}
    clients = think_weighted = lived_weighted = 0.0
    for directory, account, mine in requesters:
        counts.update(replies=mine.replies, timed_out=mine.timed_out, late=mine.late, duplicates=mine.duplicates)
        counts["skipped_by_sut"] += mine.skipped_by_sut
        counts["requests"] += account.sent
        foreign.update(mine.foreign)
        waiting = mine.clients * mine.outstanding
        clients += waiting
        think_weighted += waiting * mine.think_time_mean_s
        # A requester from before the measured figure: the planned one stands in for it.
        lived = mine.think_time_measured_s
        lived_weighted += waiting * (mine.think_time_mean_s if lived is None else lived)
        for name, file in _REQUESTER_LOGS.items():
            if (directory / file).exists():
                totals[name].add(read_total(directory / file, since_ms))
    response = totals["response_time_us"]
    think_s = think_weighted / clients if clients else 0.0
    lived_s = lived_weighted / clients if clients else 0.0
    # Little's law: what is waiting or thinking = throughput x the time each spends at it. The
    # time between a reply and the next request is the think time as lived (a timer wakes late
    # on a busy host), so the law checks the figures against each other, not against the plan.
    predicted = throughput * (response.get_mean_value() / 1e6 + lived_s)
    return RequestReplyFigures(
        replies=counts["replies"],
        timed_out=counts["timed_out"],
        late=counts["late"],
        duplicates=counts["duplicates"],
        skipped_by_sut=counts["skipped_by_sut"],
        requests=counts["requests"],
        foreign=dict(foreign),
        throughput_per_s=throughput,
        legs_uncertainty_us=round(max((c.uncertainty_us for c in corrections.values()), default=0.0), 1),
        think_time_mean_s=think_s,
        think_time_measured_s=lived_s,
        response_time_us=_times(totals["response_time_us"]),
        replier_us=_times(totals["replier_us"]),
        request_leg_us=_times(totals["request_leg_us"]),
        reply_leg_us=_times(totals["reply_leg_us"]),
        hints=tuple(_nagle_hints({"request leg": totals["request_leg_us"], "reply leg": totals["reply_leg_us"]})),
        littles_law=LittlesLaw(clients, predicted, 100 * (predicted - clients) / clients if clients else 0.0),
    )


# Nagle's algorithm holding a small write until the previous one is acknowledged, against a
# delayed ACK (Linux: 40 ms), puts a mode at 40-44 ms on the leg it sits on: MQTT 5
# request/reply through a stock Mosquitto had 41.7 of its 43.8 ms on the reply leg.
_NAGLE_US = (36_000, 50_000)
_NAGLE_SHARE = 0.25


def _nagle_hints(histograms: Mapping[str, HdrHistogram]) -> list[str]:
    """A hint for each series with a quarter or more of its samples at 36-50 ms."""
    hints = []
    for name, histogram in histograms.items():
        total = histogram.get_total_count()
        near = sum(
            item.count_at_value_iterated_to
            for item in histogram.get_recorded_iterator()
            if _NAGLE_US[0] <= item.value_iterated_to <= _NAGLE_US[1]
        )
        if total and near / total >= _NAGLE_SHARE:
            hints.append(
                f"{near / total:.0%} of the {name} samples lie at 36-50 ms: the mark of Nagle's algorithm against "
                "delayed ACKs (40 ms) on some connection of the path; TCP_NODELAY on the client or the broker "
                "(Mosquitto: set_tcp_nodelay true) removes it"
            )
    return hints


def _percentiles(histogram: Any) -> dict[str, float]:
    return {name: float(histogram.get_value_at_percentile(p)) for name, p in PERCENTILES.items()}


def _times(histogram: Any) -> TimeFigures:
    return TimeFigures(
        **_percentiles(histogram),
        mean=float(histogram.get_mean_value()),
        max=float(histogram.get_max_value()),
        samples=histogram.get_total_count(),
    )


def receive_seconds(peers: Peers, since_us: int = 0) -> RateSeconds:
    """The receivers' arrivals by second, merged over them, of the messages intended at or after
    `since_us` (a whole second: summarize cuts the warm-up there; 0 keeps every message)."""
    receives = RateSeconds()
    for directory, peer, _ in _receivers(peers):
        _add(receives, directory, peer.files, since_us)
    return receives


def _add(total: RateSeconds, directory: Path, names: Sequence[str], since_us: int) -> None:
    """A peer's counts by second, first and last time into the running total: from its
    writers' pieces, and from the rows of any rate file no piece covers (a folder written
    before pieces existed, or a writer that never closed)."""
    covered: set[str] = set()
    for name in names:
        if name.endswith(PIECE_SUFFIX):
            piece = RatePiece.read(directory / name)
            total.add(piece.seconds(since_us))
            covered.update(piece.files)
    for name in names:
        if name.endswith(".csv.gz") and name not in covered:
            total.add(rate_seconds((directory / name).read_bytes(), str(directory / name), since_us))


def _latency(
    receivers: list[tuple[Path, PeerRecord, ReceiverAccount]], corrections: dict[str, Correction], warm_up_end_us: int
) -> tuple[Any, int]:
    """The receivers' corrected-latency intervals after warm-up, merged, each receiver's shifted
    the rest of the way by its clock correction; and how many samples a correction put below
    1 µs, as the receivers recorded them (all the test's) and here."""
    latency = new_histogram()
    clamped = 0
    for directory, peer, account in receivers:
        clamped += account.latency_clamped
        hlog = directory / "receiver-latency.hlog"
        if not hlog.exists():
            continue
        correction = corrections.get(peer.name)
        for interval in read_intervals(hlog):
            if interval.get_start_time_stamp() * 1000 >= warm_up_end_us:
                moved, below = shifted(interval, left_to_shift(correction, account, interval))
                clamped += below
                latency.add(moved)
    return latency, clamped


def _peer_rows(peers: Peers, corrections: dict[str, Correction]) -> list[PeerFigures]:
    rows = []
    for _, info in peers:
        correction = corrections.get(info.name) if info.receiver is not None else None
        closed = info.sender.request_reply if info.sender is not None else None
        rows.append(
            PeerFigures(
                name=info.name,
                role=info.role,
                host=info.host,
                failure=info.failure,
                sent=None if info.sender is None else info.sender.sent,
                received=None if info.receiver is None else info.receiver.received,
                replies=None if closed is None else closed.replies,
                timed_out=None if closed is None else closed.timed_out,
                latency_correction_us=None if correction is None else round(correction.shift_us, 1),
                latency_uncertainty_us=None if correction is None else round(correction.uncertainty_us, 1),
                clock_path=None if correction is None else correction.path,
                generator_bound=_generator_bound(info),  # in summary.json too: not a SUT figure
                inspector_shortfall=tuple(_inspector_shortfalls(info)),  # its series are missing or thin
            )
        )
    return rows


def inspector_shortfalls(peers: Peers) -> list[str]:
    """Inspectors that collected no sample, or fewer than half of what their interval and the
    time they ran should have given: their charts are missing or mostly gaps."""
    return [why for _, info in peers for why in _inspector_shortfalls(info)]


def _inspector_shortfalls(info: PeerRecord) -> list[str]:
    if info.inspectors is None:
        return []
    ran_s = ((info.ended_ns or 0) - (info.started_ns or 0)) / 1e9
    found = []
    for name, inspector in sorted(info.inspectors.items()):
        interval_s, samples, errors = inspector.interval_s, inspector.samples, inspector.errors
        # One sample at the start, then one per interval.
        expected = 1 + int(ran_s // interval_s) if interval_s > 0 and ran_s > 0 else 1
        last = f"; last error: {inspector.last_error}" if inspector.last_error else ""
        if samples == 0:
            found.append(f"inspector {name} on {info.name} collected no sample ({errors} failed{last})")
        elif samples < expected / 2:
            found.append(
                f"inspector {name} on {info.name} collected {samples} of about {expected} samples "
                f"({errors} failed{last})"
            )
    return found


def generator_bound(peers: Peers) -> list[str]:
    """Why the load generator, not the SUT, may have limited the run: a sender whose process
    was nearly always on the CPU, or whose event loop woke far too late to keep a schedule."""
    return [why for _, info in peers if (why := _generator_bound(info))]


# A sender this far behind its schedule at p99, itself not busy, was held back by the SUT.
_HELD_BACK_LAG_US = 100_000


def _held_back_hints(peers: Peers) -> list[str]:
    """A hint for each sender far behind its schedule while neither its CPU nor its event loop
    was the limit: the only other brake is its window of messages the SUT has not settled yet
    (worker.sender), so the SUT was slow to confirm. At 5,000 msg/s through a RabbitMQ that
    shared two cores with the workers, a sender at 67 % of a core lagged 613 ms at p99, and
    the latency, measured from the schedule (no coordinated omission), carried it."""
    hints = []
    for _, info in peers:
        if info.sender is None or _generator_bound(info):
            continue
        lag_us = (info.sender.schedule_lag_us or {}).get("99", 0)
        if lag_us >= _HELD_BACK_LAG_US:
            hints.append(
                f"sender {info.name} fell {lag_us / 1000:,.0f} ms behind its schedule at p99 while its process was "
                "not the limit: it waited for the SUT to settle the messages of its window, so the SUT took "
                "the load more slowly than it was offered (the latency, measured from the schedule, includes "
                "the wait; a SUT sharing the generator's cores is slowed by it too)"
            )
    return hints


def _generator_bound(info: PeerRecord) -> str | None:
    if info.sender is None:
        return None
    monitor = info.self_monitor or SelfMonitorSummary()
    cpu, loop = monitor.cpu_percent_mean, monitor.loop_lag_ms_max
    if cpu < BUSY_CPU_PERCENT and loop < BUSY_LOOP_LAG_MS:
        return None
    lag = (info.sender.schedule_lag_us or {}).get("99", 0) / 1000
    return (
        f"sender {info.name} used {cpu:.0f} % of a core on average (event loop up to {loop:.0f} ms "
        f"late, schedule lag p99 {lag:.1f} ms): these figures show the generator's limit, not the SUT's"
    )

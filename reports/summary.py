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

import json
from collections import Counter
from pathlib import Path
from typing import Any

from protocol.hdr import new_histogram, read_intervals, read_total
from protocol.ratefile import PIECE_SUFFIX, RatePiece, RateSeconds, rate_seconds, whole_second_at_or_after
from protocol.sequences import load_bitset, merge_bitsets
from reports.clocks import Correction, clock_corrections, shifted

__all__ = [
    "Peers",
    "generator_bound",
    "inspector_shortfalls",
    "rate_of",
    "read_peers",
    "read_test_json",
    "summarize",
]

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
# The points of the whole-test percentile distribution (the report's HDR-style plot).
DISTRIBUTION = (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100)


Peers = list[tuple[Path, dict[str, Any]]]  # each peer's folder and its peer.json


def read_peers(test_dir: Path) -> Peers:
    """Every peer.json of a test folder, with the folder it describes."""
    found = []
    for path in sorted(test_dir.glob("*/*/peer.json")):
        try:
            found.append((path.parent, json.loads(path.read_text())))
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from exc
    return found


def read_test_json(test_dir: Path) -> dict[str, Any]:
    """The coordinator's record of a test; empty while there is none (or it is unreadable)."""
    try:
        info: dict[str, Any] = json.loads((test_dir / "test.json").read_text())
    except (OSError, ValueError):
        return {}
    return info


def rate_of(buckets: Counter[int]) -> dict[str, float]:
    """Messages per whole second from counts by second. The first and last seconds are partial
    and left out when there are whole ones between them."""
    if not buckets:
        return {"mean": 0.0, "min": 0.0, "max": 0.0}
    first, last = min(buckets), max(buckets)
    whole = [buckets.get(s, 0) for s in range(first + 1, last)]
    if not whole:
        whole = [sum(buckets.values())]
    return {"mean": sum(whole) / len(whole), "min": float(min(whole)), "max": float(max(whole))}


def summarize(test_dir: Path, peers: Peers | None = None, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """`peers` and `record` (test.json): when the caller has read them already. Latency is
    corrected across hosts by the clock offsets test.json records (reports.clocks)."""
    peers = read_peers(test_dir) if peers is None else peers
    corrections = clock_corrections(read_test_json(test_dir) if record is None else record)
    senders = [(d, p) for d, p in peers if p.get("role") == "sender"]
    receivers = [(d, p) for d, p in peers if p.get("role") == "receiver"]
    warmed = [p for _, p in senders if p.get("warm_up_s", 0) > 0]
    # No warm-up: everything counts, including receivers' intervals begun before the senders.
    warm_up_end_us = max((p.get("warm_up_end_ns", 0) // 1000 for p in warmed), default=0)

    sent_by_key: dict[str, int] = {}
    peer_of_key: dict[str, str] = {}
    sends = RateSeconds()
    for directory, info in senders:
        sent_by_key |= {key: client["sent"] for key, client in info.get("senders", {}).items()}
        peer_of_key |= {
            key: f"{info.get('name')}/{client['client']}" for key, client in info.get("senders", {}).items()
        }
        _add(sends, directory, info.get("files", []), whole_second_at_or_after(warm_up_end_us))

    bitsets: dict[str, list[bytes]] = {}
    deliveries: Counter[str] = Counter()
    out_of_order: Counter[str] = Counter()  # as each receiver saw its share of the sender's stream
    receives = RateSeconds()
    latency, clamped = _latency(receivers, corrections, warm_up_end_us)
    foreign: Counter[str] = Counter()
    skipped = 0
    for directory, info in receivers:
        foreign.update(info.get("foreign", {}))
        skipped += info.get("skipped_by_sut", 0)
        for key, counts in info.get("per_sender", {}).items():
            deliveries[key] += counts["deliveries"]
            out_of_order[key] += counts.get("out_of_order", 0)
        sequences = directory / "receiver-sequences.json"
        if sequences.exists():
            for key, text in json.loads(sequences.read_text()).items():
                bitsets.setdefault(key, []).append(load_bitset(text))
        _add(receives, directory, info.get("files", []), whole_second_at_or_after(warm_up_end_us))

    received = lost = duplicates = 0
    per_sender = []
    for key in sorted(sent_by_key.keys() | bitsets.keys()):
        merged = merge_bitsets(bitsets.get(key, []), deliveries[key])
        expected = sent_by_key.get(key, 0)
        key_lost = max(0, expected - merged.distinct)
        received += merged.distinct
        duplicates += merged.duplicates
        lost += key_lost
        per_sender.append(
            {
                "sender": peer_of_key.get(key, key),
                "key": key,
                "expected": expected,
                "received": merged.distinct,
                "lost": key_lost,
                "lost_percent": 100 * key_lost / expected if expected else 0.0,
                "duplicates": merged.duplicates,
                "out_of_order": out_of_order[key],
            }
        )
    first_send = sends.first_ata_us
    end = max((x for x in (sends.last_ata_us, receives.last_ata_us) if x is not None), default=None)
    return {
        "test_id": test_dir.name,
        "duration_s": (end - first_send) / 1e6 if first_send is not None and end is not None else 0.0,
        "sent": sum(sent_by_key.values()),
        "received": received,
        "lost": lost,
        "duplicates": duplicates,
        "foreign": dict(foreign),
        # Of the lost: messages the SUT's own numbering shows it passed over (Kafka offsets).
        "skipped_by_sut": skipped,
        "send_rate": rate_of(sends.per_second),
        "receive_rate": rate_of(receives.per_second),
        "latency_us": {
            **{name: float(latency.get_value_at_percentile(p)) for name, p in PERCENTILES.items()},
            "max": float(latency.get_max_value()),
        },
        "latency_samples": latency.get_total_count(),
        "latency_distribution_us": [[p, float(latency.get_value_at_percentile(p))] for p in DISTRIBUTION],
        "per_sender": per_sender,
        "peers": _peer_rows(peers, corrections),
        "latency_clamped_by_correction": clamped,
        # Open: senders on a schedule. Closed: requesters waiting for replies (request/reply).
        "load_model": "closed" if any("request_reply" in info for _, info in senders) else "open",
        **_request_reply(senders, warm_up_end_us, sends, corrections),
    }


# The requester's logs (worker.requester.REQUESTER_LOGS) and the figures they become.
_REQUESTER_LOGS = {
    "response_time_us": "requester-response.hlog",
    "replier_us": "requester-replier.hlog",
    "request_leg_us": "requester-request-leg.hlog",
    "reply_leg_us": "requester-reply-leg.hlog",
}


def _request_reply(
    senders: Peers, warm_up_end_us: int, answered: RateSeconds, corrections: dict[str, Correction]
) -> dict[str, Any]:
    """A closed system's figures, merged over its requesters: counts, throughput (`answered`:
    their rate files, a row per request answered in time, by the reply's second), response time
    and its legs after warm-up, and Little's law as a check on them all. The legs cross from a
    requester's clock to a replier's and back: where the repliers run on other hosts they were
    corrected by the measured offsets (worker.requester), and `corrections` (the one-way rule,
    repliers being the receivers) gives their uncertainty."""
    requesters = [(d, p) for d, p in senders if "request_reply" in p]
    if not requesters:
        return {}
    since_ms = warm_up_end_us // 1000
    counts: Counter[str] = Counter()
    foreign: Counter[str] = Counter()
    totals = {name: new_histogram() for name in _REQUESTER_LOGS}
    throughput = rate_of(answered.per_second)["mean"]
    clients = think_weighted = lived_weighted = 0.0
    for directory, info in requesters:
        mine = info["request_reply"]
        counts.update({k: mine[k] for k in ("replies", "timed_out", "late", "duplicates")})
        counts["skipped_by_sut"] += mine.get("skipped_by_sut", 0)
        counts["requests"] += info.get("sent", 0)
        foreign.update(mine.get("foreign", {}))
        waiting = mine["clients"] * mine["outstanding"]
        clients += waiting
        think_weighted += waiting * mine.get("think_time_mean_s", 0.0)
        # A requester from before the measured figure: the planned one stands in for it.
        lived = mine.get("think_time_measured_s")
        lived_weighted += waiting * (mine.get("think_time_mean_s", 0.0) if lived is None else lived)
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
    return {
        "request_reply": {
            **counts,
            "foreign": dict(foreign),
            "throughput_per_s": throughput,
            # ± on the request and reply legs: 0 where requester and replier share a clock.
            "legs_uncertainty_us": round(max((c.uncertainty_us for c in corrections.values()), default=0.0), 1),
            "think_time_mean_s": think_s,
            "think_time_measured_s": lived_s,
            **{name: _percentiles(h) for name, h in totals.items()},
            "littles_law": {
                "clients": clients,
                "throughput_x_time": predicted,
                "deviation_percent": 100 * (predicted - clients) / clients if clients else 0.0,
            },
        }
    }


def _percentiles(histogram: Any) -> dict[str, float]:
    figures = {name: float(histogram.get_value_at_percentile(p)) for name, p in PERCENTILES.items()}
    return figures | {
        "mean": float(histogram.get_mean_value()),
        "max": float(histogram.get_max_value()),
        "samples": histogram.get_total_count(),
    }


def _add(total: RateSeconds, directory: Path, names: list[str], since_us: int) -> None:
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


def _latency(receivers: Peers, corrections: dict[str, Correction], warm_up_end_us: int) -> tuple[Any, int]:
    """The receivers' corrected-latency intervals after warm-up, merged, each receiver's shifted
    by its clock correction; and how many values the shift would have put below 1 µs."""
    latency = new_histogram()
    clamped = 0
    for directory, info in receivers:
        hlog = directory / "receiver-latency.hlog"
        if not hlog.exists():
            continue
        correction = corrections.get(str(info.get("name")))
        for interval in read_intervals(hlog):
            if interval.get_start_time_stamp() * 1000 >= warm_up_end_us:
                moved, below = shifted(interval, correction.shift_us if correction else 0.0)
                clamped += below
                latency.add(moved)
    return latency, clamped


def _peer_rows(peers: Peers, corrections: dict[str, Correction]) -> list[dict[str, Any]]:
    rows = []
    for _, info in peers:
        row = {k: info.get(k) for k in ("name", "role", "host", "failure")}
        row |= {k: info[k] for k in ("sent", "received") if k in info}
        if info.get("role") == "receiver":
            row |= _correction_fields(corrections.get(str(info.get("name"))))
        if why := _generator_bound(info):
            row["generator_bound"] = why  # in summary.json too: not a SUT figure
        if shortfalls := _inspector_shortfalls(info):
            row["inspector_shortfall"] = shortfalls  # its series are missing or thin
        rows.append(row)
    return rows


def _correction_fields(correction: Correction | None) -> dict[str, Any]:
    if correction is None:
        return {}
    return {
        "latency_correction_us": round(correction.shift_us, 1),
        "latency_uncertainty_us": round(correction.uncertainty_us, 1),
    }


# A sender this busy was the limit itself: its figures describe the load generator, not the SUT.
_BUSY_CPU_PERCENT = 90.0
_BUSY_LOOP_LAG_MS = 100.0


def inspector_shortfalls(peers: Peers) -> list[str]:
    """Inspectors that collected no sample, or fewer than half of what their interval and the
    time they ran should have given: their charts are missing or mostly gaps."""
    return [why for _, info in peers for why in _inspector_shortfalls(info)]


def _inspector_shortfalls(info: dict[str, Any]) -> list[str]:
    if info.get("role") != "inspector":
        return []
    ran_s = (int(info.get("ended_ns", 0)) - int(info.get("started_ns", 0))) / 1e9
    found = []
    for name, inspector in sorted(info.get("inspectors", {}).items()):
        interval_s = float(inspector.get("interval_s") or 0)
        samples, errors = int(inspector.get("samples", 0)), int(inspector.get("errors", 0))
        # One sample at the start, then one per interval.
        expected = 1 + int(ran_s // interval_s) if interval_s > 0 and ran_s > 0 else 1
        last = f"; last error: {inspector['last_error']}" if inspector.get("last_error") else ""
        if samples == 0:
            found.append(f"inspector {name} on {info.get('name')} collected no sample ({errors} failed{last})")
        elif samples < expected / 2:
            found.append(
                f"inspector {name} on {info.get('name')} collected {samples} of about {expected} samples "
                f"({errors} failed{last})"
            )
    return found


def generator_bound(peers: Peers) -> list[str]:
    """Why the load generator, not the SUT, may have limited the run: a sender whose process
    was nearly always on the CPU, or whose event loop woke far too late to keep a schedule."""
    return [why for _, info in peers if (why := _generator_bound(info))]


def _generator_bound(info: dict[str, Any]) -> str | None:
    if info.get("role") != "sender":
        return None
    monitor = info.get("self_monitor", {})
    cpu, loop = monitor.get("cpu_percent_mean", 0.0), monitor.get("loop_lag_ms_max", 0.0)
    if cpu < _BUSY_CPU_PERCENT and loop < _BUSY_LOOP_LAG_MS:
        return None
    lag = info.get("schedule_lag_us", {}).get("99", 0) / 1000
    return (
        f"sender {info.get('name')} used {cpu:.0f} % of a core on average (event loop up to {loop:.0f} ms "
        f"late, schedule lag p99 {lag:.1f} ms): these figures show the generator's limit, not the SUT's"
    )

"""Result folders with known answers, written with the real file writers."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from protocol.file_check import check_files
from protocol.ratefile import RateFileWriter
from protocol.results import PeerRecord, write_peer_json
from protocol.sequences import SequenceTracker, dump_bitsets
from worker.latency import RECEIVER_LOGS, LatencyRecorder

T0_US = 1_800_000_000_000_000  # a whole second
KEY = 0xA1


def _peer(directory: Path, info: dict[str, Any], *, checked: bool = True) -> None:
    """peer.json as a peer writes it, with the checks of the files it names (`checked`) or as
    one written before there were any."""
    record = PeerRecord.from_json(info)
    write_peer_json(directory, replace(record, checks=check_files(directory, record.files) if checked else None))


def edit_peer_json(path: Path, edit: Callable[[dict[str, Any]], object], *, checked: bool = True) -> None:
    """A peer.json changed as if its peer had written it so: `edit` changes its JSON in place,
    and it is written again with its SHA-256 and the checks of its files as they are now."""
    info = json.loads(path.read_text())
    info.pop("record_sha256", None)
    info.pop("checks", None)
    edit(info)
    _peer(path.parent, info, checked=checked)


def one_loss_one_duplicate(
    root: Path,
    test_id: str = "t1",
    gap_us: int = 100_000,
    latencies_us: Sequence[int] = range(1000, 1_000_000, 25_000),
    receiver_shift_us: int = 0,
) -> Path:
    """A test folder with known answers: 40 sent every `gap_us` (10/s) from T0 + 0.25 s, one lost, one duplicated.

    `latencies_us`: the 40 arrivals' latencies as the receivers' clocks read them (below zero
    for a receiver whose clock is behind its senders'); `receiver_shift_us`: the clock
    correction the receivers were given, which they add as they record (worker.latency)."""
    test = root / test_id
    # One sender, 40 messages at 10/s from T0 + 0.25 s.
    sender_dir = test / "sender" / "s1"
    sender_dir.mkdir(parents=True)
    rates = RateFileWriter(sender_dir, "sender", {})
    for i in range(40):
        eta = T0_US + 250_000 + i * gap_us
        rates.write(eta, eta + 10)
    rates.close()
    _peer(
        sender_dir,
        {
            "name": "s1",
            "role": "sender",
            "host": "h",
            "sent": 40,
            "senders": {f"{KEY:016x}": {"client": 0, "sent": 40}},
            "files": rates.names(),
            "warm_up_s": 0.0,
            "warm_up_end_ns": T0_US * 1000,
        },
    )
    # r1 got 0-19, r2 got 19-38: 19 twice (a duplicate), 39 never (lost).
    latencies = iter(latencies_us)
    for name, sequences in (("r1", range(20)), ("r2", range(19, 39))):
        directory = test / "receiver" / name
        directory.mkdir(parents=True)
        tracker = SequenceTracker()
        recorder = LatencyRecorder(directory, shift_us=receiver_shift_us)
        rows = RateFileWriter(directory, "receiver", {})
        for seq in sequences:
            tracker.record(seq)
            value = next(latencies)
            recorder.record(value, value // 2)
            rows.write(T0_US + 250_000 + seq * gap_us, T0_US + 250_000 + seq * gap_us + value)
        recorder.close()
        rows.close()
        (directory / "receiver-sequences.json").write_text(json.dumps(dump_bitsets({KEY: tracker})))
        _peer(
            directory,
            {
                "name": name,
                "role": "receiver",
                "host": "h",
                "received": 20,
                "per_sender": {f"{KEY:016x}": {"deliveries": 20}},
                "files": [*rows.names(), *(name for _, name in RECEIVER_LOGS), "receiver-sequences.json"],
                "latency_shift_us": receiver_shift_us,
                "latency_clamped": recorder.clamped,
            },
        )
    return test


def history_run(
    root: Path,
    name: str,
    night: int,
    rate: float,
    *,
    p99_us: float = 2_000.0,
    lost: int = 0,
    outcome: str = "success",
    generator_bound: bool = False,
    duplicates: int = 0,
    reason: str | None = None,
    rate_per_client: float = 1000.0,
    cpu_model: str = "Lab CPU 9000",
    started: str | None = None,
    tail: float | None = None,
    latency_untrusted: str | None = None,
) -> str:
    """One night's test.json of a test named `name`, as the coordinator stores it, with these
    figures: what `maestro history` reads. Its test id. `rate_per_client` is its workload (its
    definition), `cpu_model` its testbed; `latency_untrusted`: why it has no latency figure. With
    `tail`, its latency curve too (as reports.summary writes it), whose p99.95 and p99.99 are
    `tail` times a curve that p99_us scales."""
    test_id = f"{name.replace(' ', '-')}-{night:03d}"
    peers: list[dict[str, object]] = [{"name": "s1", "role": "sender"}]
    if generator_bound:
        peers[0]["generator_bound"] = "sender s1 used 99 % of a core"
    record = {
        "test_id": test_id,
        "name": name,
        "started": started or f"2026-10-{1 + night // 24:02d}T{night % 24:02d}:00:00.000+00:00",
        "outcome": outcome,
        "reason": reason,
        "definition": {
            "kind": "fixed-rate",
            "name": name,
            "rate": rate_per_client,
            "send_url": f"amqp://guest:***@sut:5672/q-{night}",
            "labels": {"night": night, "sut_version": "3.13.7"},
        },
        "labels": {"night": night, "sut_version": "3.13.7"},
        "testbed": {
            "coordinator": {"host": "ctl", "cpu_model": cpu_model, "cores": 8, "kernel": "6.1.0", "virtual": False},
            "hosts": ["lab-1", "lab-2"],
            "client_libraries": {"aio-pika": "9.5.0"},
        },
        "summary": {
            "sent": 100_000,
            "received": 100_000 - lost + duplicates,
            "lost": lost,
            "duplicates": duplicates,
            "receive_rate": {"mean": rate, "min": rate, "max": rate},
            "latency_us": {"p50": p99_us / 4, "p90": p99_us / 2, "p99": p99_us, "p999": p99_us * 2, "max": 1e5},
            "peers": peers,
        },
    }
    if latency_untrusted is not None:  # kept a success (`untrusted_latency="warn"`): no latency figure
        record["summary"] |= {"latency_us": None, "latency_untrusted": latency_untrusted}  # type: ignore[operator]
    if tail is not None:
        shape = {10: 0.15, 25: 0.2, 50: 0.25, 75: 0.35, 90: 0.5, 95: 0.6, 99: 1.0, 99.5: 1.4, 99.9: 2.0}
        shape |= {99.95: 3.0 * tail, 99.99: 5.0 * tail, 99.999: 8.0, 100: 50.0}
        record["summary"] |= {  # type: ignore[operator]
            "latency_samples": 100_000,
            "latency_distribution_us": [[p, p99_us * k] for p, k in shape.items()],
        }
    (root / test_id).mkdir(parents=True)
    (root / test_id / "test.json").write_text(json.dumps(record))
    return test_id

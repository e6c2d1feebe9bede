"""The figures of a test folder against answers worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.ratefile import RateFileWriter
from protocol.sequences import SequenceTracker, dump_bitsets
from reports.summary import rate_over_seconds, summarize
from worker.latency import LatencyRecorder

T0_US = 1_800_000_000_000_000  # a whole second
KEY = 0xA1


def test_rates_count_whole_seconds_only() -> None:
    # 3 in second 0 (partial), 10 / 8 / 10 in seconds 1-3, 1 in second 4 (partial).
    times = [T0_US + 700_000 + i * 100_000 for i in range(3)]
    times += [T0_US + s * 1_000_000 + i * 100_000 for s, n in ((1, 10), (2, 8), (3, 10)) for i in range(n)]
    times += [T0_US + 4_000_000]
    assert rate_over_seconds(times) == {"mean": pytest.approx(28 / 3), "min": 8.0, "max": 10.0}
    assert rate_over_seconds([]) == {"mean": 0.0, "min": 0.0, "max": 0.0}
    # Under a second of data: the count itself, not a division by zero.
    assert rate_over_seconds([T0_US, T0_US + 10])["mean"] == 2.0


def _peer(directory: Path, info: dict[str, object]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "peer.json").write_text(json.dumps(info))


def test_a_test_folder_with_one_loss_and_one_duplicate(tmp_path: Path) -> None:
    test = tmp_path / "t1"
    # One sender, 40 messages at 10/s from T0 + 0.25 s.
    sender_dir = test / "sender" / "s1"
    sender_dir.mkdir(parents=True)
    rates = RateFileWriter(sender_dir, "sender", {})
    for i in range(40):
        eta = T0_US + 250_000 + i * 100_000
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
            "files": [p.name for p in rates.paths],
            "warm_up_s": 0.0,
            "warm_up_end_ns": T0_US * 1000,
        },
    )
    # r1 got 0-19, r2 got 19-38: 19 twice (a duplicate), 39 never (lost).
    latencies = iter(range(1000, 1_000_000, 25_000))  # 40 values, µs
    for name, sequences in (("r1", range(20)), ("r2", range(19, 39))):
        directory = test / "receiver" / name
        directory.mkdir(parents=True)
        tracker = SequenceTracker()
        recorder = LatencyRecorder(directory)
        rows = RateFileWriter(directory, "receiver", {})
        for seq in sequences:
            tracker.record(seq)
            value = next(latencies)
            recorder.record(value, value // 2)
            rows.write(T0_US + 250_000 + seq * 100_000, T0_US + 250_000 + seq * 100_000 + value)
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
                "files": [p.name for p in rows.paths],
            },
        )
    s = summarize(test)
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (40, 39, 1, 1)
    # Sends at 10/s: seconds 1, 2 and 3 are whole and hold 10 each.
    assert s["send_rate"] == {"mean": 10.0, "min": 10.0, "max": 10.0}
    # Latency from the HDR logs: each receiver records what is new to it, so the duplicate across
    # receivers is there too: 40 values 1000, 26000, ..., 976000 µs; p50 is the 20th, 476000 µs.
    assert s["latency_samples"] == 40
    assert s["latency_us"]["p50"] == pytest.approx(476_000, rel=1e-3)
    assert s["latency_us"]["max"] == pytest.approx(976_000, rel=1e-3)
    assert {p["name"] for p in s["peers"]} == {"s1", "r1", "r2"}

"""Latency across hosts, corrected by measured clock offsets: hand-worked answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.synthetic import one_loss_one_duplicate

from reports.clocks import Correction, clock_corrections
from reports.summary import summarize


def _peer(
    name: str, role: str, host: str, offset_us: float, uncertainty_us: float, *, drift_us: float = 0
) -> dict[str, Any]:
    before = {"offset_us": offset_us, "uncertainty_us": uncertainty_us, "rtt_us": 2 * uncertainty_us}
    after = {**before, "offset_us": offset_us + drift_us}
    return {"name": name, "role": role, "host": host, "clock": {"before": before, "after": after}}


def test_a_receiver_on_another_host_is_shifted_by_the_offset_difference() -> None:
    # Sender clock 5 ms ahead of the coordinator's, receiver 3 ms behind: its latencies read
    # 8 ms short, and the correction adds them back, ± the two uncertainties.
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "b", -3000, 200)]}
    assert clock_corrections(record) == {"r1": Correction(8000, 500, "receiver on b, senders on a")}


def test_one_host_means_one_clock_and_no_correction() -> None:
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "a", -3000, 200)]}
    assert clock_corrections(record) == {}
    # A receiver with a sender beside it and one elsewhere: a single shift cannot fit both.
    record["peers"].append(_peer("s2", "sender", "b", 0, 100))
    assert clock_corrections(record) == {}


def test_senders_on_several_hosts_and_drift_widen_the_uncertainty() -> None:
    record = {
        "peers": [
            _peer("s1", "sender", "a", 4000, 300),
            _peer("s2", "sender", "c", 6000, 100),
            _peer("r1", "receiver", "b", -3000, 200, drift_us=400),
        ]
    }
    (correction,) = clock_corrections(record).values()
    # Senders' mean 5000; receiver's mean -2800 (drifted 400 over the run).
    assert correction.shift_us == 7800
    # 200 + 200 (half the drift) + 300 (the worst sender) + 1000 (half the senders' spread).
    assert correction.uncertainty_us == 1700


def test_the_summary_carries_the_corrected_latency_and_its_error_bar(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    peers = [_peer("s1", "sender", "a", 5000, 300)]
    peers += [_peer(r, "receiver", "b", -3000, 200) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    s = summarize(test)
    # As measured (test_summary): p50 476000 µs, max 976000 µs; each 8000 µs more now.
    assert s["latency_us"]["p50"] == pytest.approx(484_000, rel=1e-3)
    assert s["latency_us"]["max"] == pytest.approx(984_000, rel=1e-3)
    receivers = {p["name"]: p for p in s["peers"] if p["role"] == "receiver"}
    assert receivers["r1"]["latency_correction_us"] == 8000 and receivers["r1"]["latency_uncertainty_us"] == 500
    assert s["latency_clamped_by_correction"] == 0


@pytest.mark.parametrize(("replier_host", "uncertainty_us"), [("b", 500), ("a", 0)])
def test_a_closed_systems_legs_carry_the_clocks_uncertainty(
    tmp_path: Path, replier_host: str, uncertainty_us: float
) -> None:
    # Requester on a, repliers on b: each leg crosses the two clocks and was corrected by their
    # offsets, ± the two uncertainties (300 + 200). On one host: one clock, nothing to carry.
    test = one_loss_one_duplicate(tmp_path)
    info = json.loads((test / "sender" / "s1" / "peer.json").read_text())
    info["request_reply"] = {"clients": 1, "outstanding": 1, "replies": 40, "timed_out": 0, "late": 0, "duplicates": 0}
    (test / "sender" / "s1" / "peer.json").write_text(json.dumps(info))
    peers = [_peer("s1", "sender", "a", 5000, 300)]
    peers += [_peer(r, "receiver", replier_host, -3000, 200) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    assert summarize(test)["request_reply"]["legs_uncertainty_us"] == uncertainty_us

"""test.json as a record: each golden file is what a real run's coordinator stored before the
record existed (it built test.json as a dict then), and the record writes it again byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.figures import Percentiles
from protocol.test_record import (
    UNSET,
    ClockEstimate,
    ClockSampleRow,
    Estimate,
    Outage,
    PeerClock,
    PeerEntry,
    PhaseRow,
    TestRecord,
)

GOLDEN = Path(__file__).parent / "golden"
# Real runs of 2026-11-28 on main before this record (b1572ed): `maestro demo` (Kafka through
# tansu, with an inspector and an agent), and tests/integration's incremental test (the parent
# and its failing step), search, repetitions and sweep through RabbitMQ, and a request/reply test
# and a request/reply sweep over 1-8 clients; an opening record (a coordinator killed with -9
# while its test ran) and the one `maestro collect` completed for a lost coordinator.
RUNS = (
    "kafka-demo",
    "incremental",
    "incremental-step02",
    "search",
    "repeated",
    "sweep",
    "request-reply",
    "request-reply-sweep",
    "opening",
    "collected",
)


def _golden(run: str) -> str:
    return (GOLDEN / f"test-{run}.json").read_text()


@pytest.mark.parametrize("run", RUNS)
def test_the_record_a_run_stored_is_written_again_byte_for_byte(run: str) -> None:
    text = _golden(run)
    record = TestRecord.from_text(text)
    assert record.to_text() == text
    assert TestRecord.from_json(record.to_json()) == record


def test_the_golden_runs_hold_what_each_record_is_for() -> None:
    """Not empty records written back as empty: each run has the parts its kind makes."""
    demo, incremental, step, search, repeated, sweep, rr, rr_sweep, opening, collected = (
        TestRecord.from_text(_golden(r)) for r in RUNS
    )
    assert demo.kind == "fixed-rate" and demo.outcome == "success" and demo.reason is None
    assert demo.summary is not None and demo.summary.sent == demo.summary.received > 0
    assert demo.peers is not None and {p.role for p in demo.peers} >= {"sender", "receiver", "inspector", "agent"}
    assert all(p.lost is False for p in demo.peers)
    receiver = next(p for p in demo.peers if p.role == "receiver")
    assert isinstance(receiver.clock.before, ClockEstimate) and receiver.clock.samples
    assert all(isinstance(row, ClockSampleRow) and row.path for row in receiver.clock.samples)
    assert demo.failed_at is None and demo.end and demo.testbed and demo.steps is None and demo.phase_of is None

    assert isinstance(incremental.stopped_by, str) and incremental.stopped_by.startswith("step 2:")
    assert incremental.peers is None and incremental.target_rate is None and incremental.summary is None
    assert [s.outcome for s in incremental.steps or ()] == ["success", "failure"]
    assert incremental.max_sustainable == (incremental.steps or ())[0]
    assert step.phase_of == incremental.test_id and isinstance(step.failed_at, str) and step.outcome == "failure"

    curve = search.curve or ()
    assert len(curve) == len(search.steps or ()) > 2
    assert [r.target_rate for r in curve] == sorted(r.target_rate or 0.0 for r in curve)
    assert isinstance(search.max_sustainable, PhaseRow) and isinstance(search.stopped_by, str)

    assert repeated.stopped_by is UNSET and repeated.max_sustainable is None
    estimate = (repeated.statistics or {})["receive_rate"]
    assert isinstance(estimate, Estimate) and estimate.n == 2 and estimate.ci95[0] <= estimate.mean <= estimate.ci95[1]

    assert [r.point for r in sweep.comparison or ()] == [{"rate": 10}, {"rate": 40}]
    assert sweep.best is not None and sweep.best.point is None and isinstance(sweep.best.latency_us, Percentiles)

    assert rr.kind == "request-reply" and rr.summary is not None and rr.summary.request_reply is not None
    rows = rr_sweep.comparison or ()
    assert [(r.point or {}).get("parallel") for r in rows] == [1, 2, 4, 8]
    assert all(r.reply is not None and r.reply.response_time_us.samples > 0 for r in rows)

    assert opening.outcome is None and opening.ended is UNSET and opening.failed_at is UNSET and opening.summary is None
    assert opening.peers and all(p.lost is None and p.clock.after is UNSET for p in opening.peers)
    assert collected.outcome == "failure" and "coordinator was lost" in (collected.reason or "")
    assert collected.failed_at is UNSET and collected.events is None and collected.summary is not None
    assert any("collected by `maestro collect`" in note for note in collected.notes or ())


def test_a_key_one_kind_of_record_lacks_is_not_written() -> None:
    """A phase's opening record has no end yet (no key); a series' has one that is null."""
    phase = TestRecord("t.step01", kind="fixed-rate", target_rate=10.0, started="s", peers=(PeerEntry("p"),))
    assert "ended" not in phase.to_json() and "failed_at" not in phase.to_json() and "summary" not in phase.to_json()
    assert phase.to_json()["peers"] == [
        {"name": "p", "host": "", "role": "", "peer_id": "", "version": "", "clock": {}}
    ]
    series = TestRecord("t", kind="incremental", started="s", ended=None)
    assert series.to_json()["ended"] is None and "target_rate" not in series.to_json() and series.end is None
    assert TestRecord.from_json(series.to_json()) == series
    assert TestRecord("t", stopped_by=None).to_json()["stopped_by"] is None


def test_a_clock_measured_without_an_answer_is_null_and_one_not_measured_is_left_out() -> None:
    clock = PeerClock(samples=(), before=None, path=None)
    assert clock.to_json() == {"samples": [], "before": None}
    assert PeerClock.from_json(clock.to_json()) == clock
    assert clock.estimate("before") is None and clock.estimate("after") is None


def test_a_record_an_earlier_version_wrote_still_reads() -> None:
    """Keys it lacks take their defaults; clocks from before samples were kept, and samples from
    before they carried their path, read as they were."""
    old = {
        "test_id": "t",
        "kind": "fixed-rate",
        "outcome": "success",
        "peers": [
            {"name": "r", "role": "receiver", "clock": {"before": {"offset_us": 1.5, "uncertainty_us": 2.0}}},
            {"name": "s", "role": "sender", "clock": {"samples": [[1, 2.0, 3.0]]}},
        ],
        "control_outages": [{"lost": "2026-01-01T00:00:00+00:00", "back": None}],
        "steps": [{"test_id": "t.step01", "latency_us": None}],
    }
    record = TestRecord.from_json(old)
    assert (record.name, record.labels, record.summary, record.ended, record.events) == ("", {}, None, UNSET, None)
    receiver, sender = record.peers or ()
    assert receiver.clock.estimate("before") == ClockEstimate(1.5, 2.0, 0.0, "")
    assert sender.clock.samples == (ClockSampleRow(1, 2.0, 3.0),) and sender.clock.to_json()["samples"] == [
        [1, 2.0, 3.0]
    ]
    assert record.control_outages == (Outage("2026-01-01T00:00:00+00:00"),)
    (step,) = record.steps or ()
    assert step.latency_us is None and step.receive_rate is None and step.reply is None


@pytest.mark.parametrize(
    "bad", [[], "x", {"peers": [{"clock": {"samples": [[1]]}}]}, {"summary": {"latency_samples": 1}}]
)
def test_what_is_not_a_test_record_is_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError):
        TestRecord.from_json(bad)  # type: ignore[arg-type]


def test_no_password_reaches_the_text() -> None:
    record = TestRecord("t", definition={"send_url": "amqp://guest:secret@host/q"}).noted("amqp://u:pw@h/")
    assert "secret" not in record.to_text() and "pw@" not in record.to_text()
    assert record.notes == ("amqp://u:pw@h/",)  # the record itself is as given

"""A test's figures as records: each golden file is what a real run stored (test.json's
`summary`, the report's summary.json), and the records write it again byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.figures import (
    SUMMARY_KEYS,
    Accounting,
    PeerFigures,
    RequestReplyFigures,
    TestFigures,
    read_summary_json,
    write_summary_json,
)

GOLDEN = Path(__file__).parent / "golden"
# Real runs of 2026-11-28 on this tree: `maestro demo` (Kafka through tansu, its report's
# summary.json beside), a request/reply test through RabbitMQ, and a fixed-rate test through a
# RabbitMQ queue with a RabbitMQ inspector (the SUT's own counters in `accounting`).
RUNS = ("kafka-demo", "request-reply", "amqp-rabbitmq-inspector")


@pytest.mark.parametrize("run", RUNS)
def test_the_figures_a_run_stored_are_written_again_byte_for_byte(run: str) -> None:
    text = (GOLDEN / f"figures-{run}.json").read_text()
    figures = TestFigures.from_json(json.loads(text))
    assert json.dumps(figures.to_json(), indent=2, sort_keys=True) + "\n" == text


def test_summary_json_is_the_report_s_byte_for_byte_in_design_s_order() -> None:
    figures = TestFigures.from_json(json.loads((GOLDEN / "figures-kafka-demo.json").read_text()))
    text = (GOLDEN / "summary-kafka-demo.json").read_text()
    summary = figures.summary_json("success", None)
    assert json.dumps(summary, indent=2) == text
    assert tuple(summary) == SUMMARY_KEYS


def test_the_golden_runs_hold_what_each_record_is_for() -> None:
    """Not empty records written back as empty: each run has the parts its kind makes."""
    demo, rr, amqp = (TestFigures.from_json(json.loads((GOLDEN / f"figures-{r}.json").read_text())) for r in RUNS)
    assert demo.sent == demo.received == 1600 and demo.latency_samples > 0 and demo.request_reply is None
    assert isinstance(rr.request_reply, RequestReplyFigures) and rr.load_model == "closed"
    assert rr.request_reply.requests == rr.request_reply.replies == 4293
    assert rr.request_reply.response_time_us.samples > 0 and rr.request_reply.littles_law.clients == 2
    (queue,) = amqp.accounting.sut_counters
    assert (queue.to_json()["source"], queue.queue, queue.caught_up) == ("rabbitmq", "gold.fixed", True)
    assert amqp.accounting.per_sender[0].guarantee == "at-least-once"
    assert [p.role for p in amqp.peers].count("receiver") == 1
    receiver = next(p for p in amqp.peers if p.role == "receiver")
    assert receiver.received == 3200 and receiver.sent is None and receiver.clock_path is None  # one host


def test_a_peer_row_writes_only_what_applies_to_its_role() -> None:
    assert PeerFigures("s", "sender", "h", sent=0).to_json() == {
        "name": "s",
        "role": "sender",
        "host": "h",
        "failure": None,
        "sent": 0,
    }
    row = PeerFigures("i", "inspector", inspector_shortfall=("no sample",), generator_bound="busy").to_json()
    assert row == {
        "name": "i",
        "role": "inspector",
        "host": None,
        "failure": None,
        "generator_bound": "busy",
        "inspector_shortfall": ["no sample"],
    }


def test_no_figures_are_written_as_why_and_read_back_so() -> None:
    missing = TestFigures.missing("data server at http://x: refused")
    assert missing.to_json() == {"error": "data server at http://x: refused"}
    assert TestFigures.from_json(missing.to_json()) == missing


def test_an_older_record_reads_with_defaults_and_a_wrong_one_is_named() -> None:
    old = TestFigures.from_json({"sent": 10, "received": 9, "lost": 1, "send_rate": {"mean": 5}})
    assert (old.sent, old.lost, old.send_rate.mean, old.request_reply) == (10, 1, 5.0, None)
    assert old.accounting == Accounting()  # no counts where the record had none
    assert old.latency_untrusted is None and old.load_model == "open"
    with pytest.raises(ValueError, match="JSON object"):
        TestFigures.from_json([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a test's figures"):
        TestFigures.from_json({"per_sender": [{"key": "k"}]})


def test_summary_json_has_no_latency_where_it_is_no_figure() -> None:
    figures = TestFigures.from_json(json.loads((GOLDEN / "figures-kafka-demo.json").read_text()))
    summary = figures.judged("latency not measured: 3 samples clamped").summary_json("invalid", "why")
    assert summary["latency_us"] is None and summary["latency_untrusted"] == "latency not measured: 3 samples clamped"
    assert (summary["outcome"], summary["reason"]) == ("invalid", "why")


def test_a_summary_json_is_written_whole_and_read_back_as_figures(tmp_path: Path) -> None:
    figures = TestFigures(test_id="t1", sent=10, received=9, lost=1)
    path = write_summary_json(tmp_path, figures.summary_json("failed", "lost 1 of 10"))
    assert tuple(json.loads(path.read_text())) == SUMMARY_KEYS
    back = read_summary_json(path)
    assert (back.test_id, back.sent, back.received, back.lost) == ("t1", 10, 9, 1)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"summary\.json: not a test's summary"):
        read_summary_json(path)

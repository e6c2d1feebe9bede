"""A history in Otava's CSV, Bencher's BMF and github-action-benchmark's JSON, and the webhook a
regression or an invalid run sends, on hand-made runs whose every figure is known."""

from __future__ import annotations

import csv
import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from reports.exports import (
    NotExportableError,
    bencher_bmf,
    github_benchmark,
    otava_csv,
    post_webhook,
    webhook_body,
)
from reports.history import FIGURES, History, Run, analyse
from reports.verdict import GateRules, GateVerdict, Verdict, judge


def _run(n: int, rate: float, *, outcome: str = "success", workload: str = "w", **figures: float | None) -> Run:
    values: dict[str, float | None] = {f.key: None for f in FIGURES}
    values |= {"receive_rate": rate, "latency_p50_us": 250.0, "latency_p99_us": 1200.0, "loss_ratio": 0.0}
    values |= {"duplicate_ratio": 0.0, "latency_p999_us": 3000.5} | figures
    started = f"2026-10-{n + 1:02d}T02:00:00+00:00"
    return Run(f"run-{n:02d}", started, outcome, values, reason="why", workload=workload, testbed="tb")


def _history(*runs: Run) -> History:
    return analyse("nightly rabbitmq", list(runs))


def test_otava_gets_the_comparable_runs_each_figure_a_column_and_an_empty_cell_for_none() -> None:
    history = _history(
        _run(0, 100.0),
        _run(1, 90.0, outcome="failure"),  # left out: failed
        _run(2, 80.0, workload="other"),  # left out: another workload than the newest
        _run(3, 101.5, latency_p99_us=None),  # an untrusted latency: no figure, not 0
    )
    rows = list(csv.DictReader(io.StringIO(otava_csv(history))))
    assert [r["test_id"] for r in rows] == ["run-00", "run-03"]
    assert rows[0]["time"] == "2026-10-01 02:00:00 +0000" and rows[1]["time"] == "2026-10-04 02:00:00 +0000"
    assert list(rows[0]) == ["time", "test_id", *(f.key for f in FIGURES)]
    assert float(rows[1]["receive_rate"]) == 101.5 and rows[1]["latency_p99_us"] == ""
    assert float(rows[0]["latency_p999_us"]) == 3000.5  # as it is, not rounded


def test_bencher_gets_the_newest_run_with_latency_in_nanoseconds() -> None:
    bmf = json.loads(bencher_bmf(_history(_run(0, 100.0), _run(1, 98.0, latency_p99_us=None))))
    assert bmf == {
        "nightly rabbitmq: Receive rate": {"throughput": {"value": 98.0}},
        "nightly rabbitmq: Latency p50": {"latency": {"value": 250_000.0}},
        "nightly rabbitmq: Latency p99.9": {"latency": {"value": 3_000_500.0}},
        "nightly rabbitmq: Loss (lost / sent)": {"loss-ratio": {"value": 0.0}},
        "nightly rabbitmq: Duplicates (duplicates / sent)": {"duplicate-ratio": {"value": 0.0}},
    }


def test_github_action_benchmark_gets_each_figure_by_its_direction() -> None:
    history = _history(_run(0, 100.0), _run(1, 98.0))
    bigger = json.loads(github_benchmark(history, bigger_is_better=True))
    assert bigger == [
        {"name": "nightly rabbitmq: Receive rate", "unit": "msg/s", "value": 98.0, "extra": "test id run-01"}
    ]
    smaller = json.loads(github_benchmark(history, bigger_is_better=False))
    assert [(b["name"].split(": ")[1], b["unit"], b["value"]) for b in smaller] == [
        ("Latency p50", "ms", 0.25),
        ("Latency p99", "ms", 1.2),
        ("Latency p99.9", "ms", 3.0005),
        ("Loss (lost / sent)", "ratio", 0.0),
        ("Duplicates (duplicates / sent)", "ratio", 0.0),
    ]


@pytest.mark.parametrize(("outcome", "why"), [("invalid", "is invalid: why"), ("failure", "ended 'failure'")])
def test_a_newest_run_that_did_not_measure_the_sut_is_not_exported_as_one(outcome: str, why: str) -> None:
    history = _history(_run(0, 100.0), _run(1, 5.0, outcome=outcome))
    for export in (bencher_bmf, lambda h: github_benchmark(h, bigger_is_better=True)):
        with pytest.raises(NotExportableError, match=f"the newest run run-01 {why}; it did not measure the SUT"):
            export(history)
    assert "run-01" not in otava_csv(history)


def _verdict(history: History) -> GateVerdict:
    return judge(history, GateRules(min_runs=3))


def test_a_webhook_is_news_only_for_a_regression_or_an_invalid_run() -> None:
    steady = [_run(n, r) for n, r in enumerate((100.0, 100.02, 99.98, 100.01))]
    passed = _history(*steady, _run(4, 99.5))
    assert _verdict(passed).verdict is Verdict.PASS and webhook_body(passed, _verdict(passed)) is None

    dropped = _history(*steady, _run(4, 70.0))
    body = webhook_body(dropped, _verdict(dropped), report_url="http://lab/results/run-04/report/")
    assert body is not None and body["event"] == "REGRESSION" and body["test_id"] == "run-04"
    assert body["why"].startswith("Receive rate") and body["report"] == "http://lab/results/run-04/report/"

    invalid = _history(*steady, _run(4, 99.0, outcome="invalid"))
    verdict = _verdict(invalid)
    assert verdict.verdict is Verdict.INCONCLUSIVE
    body = webhook_body(invalid, verdict)
    assert body is not None and (body["event"], body["verdict"], body["outcome"]) == (
        "INVALID",
        "INCONCLUSIVE",
        "invalid",
    )
    slack = webhook_body(invalid, verdict, slack=True, report_url="http://lab/r")
    assert slack == {"text": f"*maestro* nightly rabbitmq: *INVALID*: {verdict.why} <http://lab/r|report>"}


class _Receiver(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[list[int]] = []  # the status of each POST in turn (then 204)
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(self.answers.pop(0) if self.answers else 204)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Handler", (_Receiver,), {"answers": [], "bodies": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook/secret-token", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_webhook_posts_json_and_asks_again_after_a_server_error(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    handler.answers.extend([503, 200])
    assert post_webhook(url, {"event": "REGRESSION"}) is None
    assert [json.loads(b) for b in handler.bodies] == [{"event": "REGRESSION"}] * 2


def test_a_refused_webhook_is_not_asked_again_and_its_url_not_said(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    handler.answers.extend([404])
    why = post_webhook(url, {"event": "INVALID"})
    assert why == "not taken after 1 attempt(s): HTTP 404" and len(handler.bodies) == 1
    assert post_webhook("http://127.0.0.1:1/hook", {}, timeout_s=1) is not None  # nobody there: said, not raised

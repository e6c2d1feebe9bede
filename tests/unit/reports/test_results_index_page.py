"""The results folder's index page: every test with its figures and a link, reported or not."""

from __future__ import annotations

import json
from pathlib import Path

from support.synthetic import history_run

from reports.report import build_index


def test_every_test_is_listed_with_its_figures_and_a_link_report_or_not(tmp_path: Path) -> None:
    reported = history_run(tmp_path, "nightly rabbitmq", 1, 1000.0, p99_us=2500.0)
    report = tmp_path / reported / "report"
    report.mkdir()
    summary = json.loads((tmp_path / reported / "test.json").read_text())["summary"]
    (report / "summary.json").write_text(json.dumps(summary | {"sent": 99_999}))  # the report's own figures
    unreported = history_run(tmp_path, "nightly rabbitmq", 2, 900.0, outcome="invalid", reason="generator-bound")
    untrusted = history_run(tmp_path, "other test", 3, 800.0)
    record = json.loads((tmp_path / untrusted / "test.json").read_text())
    record["summary"]["latency_us"] = None  # a latency that is no figure
    (tmp_path / untrusted / "test.json").write_text(json.dumps(record))

    page = build_index(tmp_path).read_text()
    rows = {r.split('">', 2)[1].split("<", 1)[0]: r for r in page.split("<tr>")[2:]}
    assert list(rows) == [untrusted, unreported, reported]  # newest first
    assert f'<a href="{reported}/report/index.html">' in rows[reported] and "<td>99,999</td>" in rows[reported]
    assert "<td>2.5</td>" in rows[reported]  # p99 in ms
    assert f'<a href="{unreported}/test.json">' in rows[unreported] and "<td>900</td>" in rows[unreported]
    assert '<td title="generator-bound">invalid</td>' in rows[unreported]
    assert "<td>800</td><td></td></tr>" in rows[untrusted]  # no p99: an empty cell, not 0
    assert '<a href="history/nightly%20rabbitmq">nightly rabbitmq</a>' in rows[reported]


def test_a_closed_systems_p99_is_its_response_times(tmp_path: Path) -> None:
    """A hostile pass: the index showed a request/reply test's request leg (p99 45.4 ms) where its
    report and history said the response time (65.1 ms)."""
    test_id = history_run(tmp_path, "rr", 1, 30.0, p99_us=45_439.0)
    record = json.loads((tmp_path / test_id / "test.json").read_text())
    times = {"p50": 9_415.0, "p90": 15_000.0, "p99": 65_119.0, "max": 80_000.0, "mean": 10_000.0}
    record["summary"]["request_reply"] = {"requests": 240, "replies": 240, "response_time_us": times}
    (tmp_path / test_id / "test.json").write_text(json.dumps(record))
    page = build_index(tmp_path).read_text()
    assert "<td>65.119</td>" in page and "45.439" not in page

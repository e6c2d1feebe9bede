"""The data server's report builder (reports/report_queue.py, reports/report_builder.py): one
process, and one Spark session, for the reports asked for one after another; it ends when
unused, after a failure (the next build starts afresh), and with the server."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from support.synthetic import one_loss_one_duplicate

from protocol.process_table import process_state
from reports.report_queue import BuildState, ReportQueue

pytestmark = pytest.mark.timeout(240)


def _built(queue: ReportQueue, test_id: str, timeout_s: float = 150) -> BuildState:
    deadline = time.monotonic() + timeout_s
    while (state := queue.ask(test_id)).state not in ("done", "failed"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    return state


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A child that exited stays a zombie until waited for; the queue waits for its builders.
    return process_state(pid) == "Z"


def test_reports_one_after_another_share_one_builder_which_ends_when_unused(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for test_id in ("t-a", "t-b"):
        one_loss_one_duplicate(root, test_id)
    queue = ReportQueue(root, idle_s=3.0)
    try:
        assert _built(queue, "t-a").state == "done"
        first = queue.builder_pid
        assert first is not None and not _gone(first)
        steps: set[str] = set()
        queue.ask("t-b")
        while (state := queue.ask("t-b")).state not in ("done", "failed"):
            steps.add(state.step)
            time.sleep(0.05)
        assert state.state == "done", state.error
        assert queue.builder_pid == first  # the same process: Spark was not started again
        assert "starting Spark" not in steps
        assert json.loads((root / "t-b" / "report" / "summary.json").read_text())["sent"] == 40
        deadline = time.monotonic() + 60  # idle for 3 s, then Spark stops and the process ends
        while not _gone(first):
            assert time.monotonic() < deadline, "the builder outlived its idle time"
            time.sleep(0.2)
        # Asked again later, a report gets a builder of its own.
        (root / "t-a" / "report" / "index.html").unlink()
        assert _built(queue, "t-a").state == "done"
        second = queue.builder_pid
        assert second is not None and second != first
    finally:
        queue.close()
    assert second is not None and _gone(second)  # the server's stop ends its builder


def test_a_failed_build_says_why_and_the_next_starts_a_fresh_builder(tmp_path: Path) -> None:
    root = tmp_path / "results"
    one_loss_one_duplicate(root, "t-good")
    for rate_file in one_loss_one_duplicate(root, "t-broken").rglob("*.csv.gz"):
        rate_file.write_bytes(b"not gzip")
    queue = ReportQueue(root, idle_s=30.0)
    try:
        failed = _built(queue, "t-broken")
        assert failed.state == "failed"
        # The build's last lines, which name the file and what is wrong with it (its peer's record
        # says what it held: 86 bytes, 20 rows; the first of the three named, the others counted).
        assert re.search(r"receiver-0000\.csv\.gz is cut short: 0 of 20 rows, 8 of 86 bytes \(and 2 more", failed.error)
        broken_builder = queue.builder_pid
        assert broken_builder is not None
        assert _built(queue, "t-good").state == "done"
        assert queue.builder_pid != broken_builder and _gone(broken_builder)
    finally:
        queue.close()


def test_the_server_stopping_mid_build_ends_the_builder_at_once(tmp_path: Path) -> None:
    root = tmp_path / "results"
    one_loss_one_duplicate(root, "t-slow")
    queue = ReportQueue(root)
    queue.ask("t-slow")
    deadline = time.monotonic() + 30
    while queue.builder_pid is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = queue.builder_pid
    assert pid is not None
    stopped = time.monotonic()
    queue.close()
    assert time.monotonic() - stopped < 10 and _gone(pid)
    assert queue.ask("t-slow").state == "failed"  # cut short, and not tried again
    assert queue.builder_pid == pid

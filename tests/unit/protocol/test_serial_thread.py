"""SerialThread: jobs in order on one thread beside the caller, errors never lost, memory bounded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from protocol.concurrency import SerialThread
from protocol.ratefile import RateFileWriter


def test_jobs_run_in_order_on_one_other_thread() -> None:
    thread = SerialThread("t")
    seen: list[tuple[int, int | None]] = []
    for i in range(200):
        thread.submit(lambda i=i: seen.append((i, threading.get_ident())))
    thread.join()
    assert [i for i, _ in seen] == list(range(200))
    assert len({ident for _, ident in seen}) == 1 and seen[0][1] != threading.get_ident()


def test_a_failed_job_is_raised_at_join_after_the_jobs_behind_it_ran() -> None:
    thread = SerialThread("t")
    ran: list[str] = []
    gate = threading.Event()

    def fail() -> None:
        gate.wait()
        raise OSError("disk full")

    thread.submit(fail)
    thread.submit(lambda: ran.append("close"))
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        thread.join()
    assert ran == ["close"]


def test_a_failed_job_is_raised_at_the_next_submit_once_done() -> None:
    thread = SerialThread("t")

    def fail() -> None:
        raise OSError("disk full")

    thread.submit(fail)
    with pytest.raises(OSError, match="disk full"):
        while True:  # the caller learns at its next submit after the job failed
            thread.submit(lambda: None)
    thread.join()


def test_the_caller_waits_once_backlog_jobs_are_queued() -> None:
    thread = SerialThread("t", backlog=2)
    gate = threading.Event()
    thread.submit(gate.wait)
    thread.submit(lambda: None)
    submitted = threading.Event()

    def third() -> None:
        thread.submit(lambda: None)
        submitted.set()

    caller = threading.Thread(target=third)
    caller.start()
    assert not submitted.wait(0.2)  # two queued behind a job that cannot finish: it waits
    gate.set()
    assert submitted.wait(5)
    caller.join()
    thread.join()


def test_a_rate_file_that_cannot_be_written_says_so_at_close(tmp_path: Path) -> None:
    writer = RateFileWriter(tmp_path / "gone", "sender", {})
    (tmp_path / "gone").rmdir()  # the disk thread's open fails
    writer.write(1, 2)
    with pytest.raises(FileNotFoundError):
        writer.close()

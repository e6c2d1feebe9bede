"""The coordinator of a `--local` run dies: by SIGTERM (`timeout`, a CI job's time limit) or by
kill -9. Real `maestro test --local` processes, RabbitMQ as the SUT.

#34: on SIGTERM no file reached the results and the data server and two workers were left
running; on kill -9 the same, with nothing to ever stop them. Known answers: on SIGTERM the test
stops and is recorded in full (interrupted, every message sent was received once, each peer's
files there); after either, no process the coordinator started is left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.processes import BIN
from support.waiting import until_blocking

from protocol.process_table import processes_naming

pytestmark = [pytest.mark.rabbitmq, pytest.mark.embedded_broker]

# The daemons stop on SIGTERM, a running one after stopping its test (it keeps its files).
_ALL_GONE_S = 15.0


def _start_local_run(cwd: Path) -> tuple[subprocess.Popen[str], str, Path]:
    """A 5-minute `maestro test --local`, once its load is about to start (the coordinator
    writes the test's opening test.json then): the process, the test id, the results folder."""
    test_id = f"doomed-{uuid.uuid4().hex[:6]}"
    queue = f"amqp://guest:guest@127.0.0.1:5672/maestro-doomed-{uuid.uuid4().hex[:8]}"
    argv = [str(BIN / "maestro"), "test", "--local", "--send-url", queue, "--rate", "50", "--parallel", "2"]
    argv += ["--duration", "5m", "--test-id", test_id, "--name", "doomed", "--quiet", "--no-report"]
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = cwd / "results"
    until_blocking(lambda: (results / test_id / "test.json").exists() or proc.poll() is not None, 60, "the load")
    assert proc.poll() is None, proc.communicate()
    time.sleep(2)  # some load through the SUT
    return proc, test_id, results


def _gone_within(where: Path, bound_s: float) -> float:
    """Seconds until no process naming `where` is left (failing the test after `bound_s`)."""
    started = time.monotonic()
    until_blocking(lambda: not processes_naming(str(where)), bound_s, f"the end of every process under {where}")
    return time.monotonic() - started


@pytest.mark.timeout(180)
def test_sigterm_stops_collects_and_records_the_test_and_leaves_nothing(tmp_path: Path) -> None:
    proc, test_id, results = _start_local_run(tmp_path)
    assert len(processes_naming(str(tmp_path))) >= 3  # the data server and two workers
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr  # interrupted, as docs/exit-codes.md says
    assert "Traceback" not in stderr, stderr
    assert "maestro test: failed: the test (interrupted (SIGTERM))" in stderr, stderr
    record: dict[str, Any] = json.loads((results / test_id / "test.json").read_text())
    assert (record["outcome"], record["reason"], record["kind"], record["name"]) == (
        "failure",
        "interrupted (SIGTERM)",
        "fixed-rate",
        "doomed",
    )
    assert record["started"] < record["ended"]
    s = record["summary"]
    assert s["sent"] > 0 and (s["received"], s["lost"], s["duplicates"]) == (s["sent"], 0, 0), s
    assert sorted(who.split("@")[0].rsplit("-", 1)[0] for who in record["collection"]) == ["worker-1", "worker-2"]
    assert len(list((results / test_id).glob("*/*/peer.json"))) == 2
    assert (results / test_id / "junit.xml").is_file()
    _gone_within(tmp_path, 5)  # stopped by the coordinator before it left


@pytest.mark.timeout(180)
def test_no_process_outlives_a_local_coordinator_killed_with_minus_9(tmp_path: Path) -> None:
    proc, _, _ = _start_local_run(tmp_path)
    started = processes_naming(str(tmp_path))
    assert len(started) >= 3
    proc.kill()
    proc.communicate(timeout=10)
    took = _gone_within(tmp_path, _ALL_GONE_S)
    assert took < _ALL_GONE_S


@pytest.mark.timeout(180)
def test_a_script_stops_at_the_test_sigterm_interrupted(tmp_path: Path) -> None:
    """A night's script under a CI job's time limit: the running test is recorded, and the next
    one never starts (before, the interrupt became that test's result and the script went on)."""
    queue = f"amqp://guest:guest@127.0.0.1:5672/maestro-doomed-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "night.py"
    script.write_text(
        "from coordinator import FixedRateTest, Maestro\n"
        f"test = FixedRateTest(send_url={queue!r}, rate=20, duration='5m')\n"
        "with Maestro.local(workers=2) as maestro:\n"
        "    for name in ('first', 'second'):\n"
        "        maestro.run(test, test_id=name, progress=False)\n"
    )
    night = subprocess.Popen(
        [str(BIN / "maestro"), "run", str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = tmp_path / "results"
    until_blocking(lambda: (results / "first" / "test.json").exists() or night.poll() is not None, 60, "the load")
    time.sleep(2)
    night.send_signal(signal.SIGTERM)
    out, err = night.communicate(timeout=120)
    assert night.returncode == 130, out + err
    assert err.strip().splitlines()[-1] == "maestro run: interrupted (SIGTERM)", err
    record = json.loads((results / "first" / "test.json").read_text())
    assert (record["outcome"], record["reason"]) == ("failure", "interrupted (SIGTERM)")
    assert record["summary"]["sent"] == record["summary"]["received"] > 0
    assert not (results / "second").exists()
    _gone_within(tmp_path, 5)

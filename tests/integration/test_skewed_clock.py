"""#16 item 2: a receiver on "another host" whose clock runs 500 ms ahead. Every figure the tool
gives (the script's TestResult, its printed form, junit.xml, test.json and the report's
summary.json) shows the same latency, corrected by the measured offset, and the receiver's
latency bound (200 ms) judges that corrected latency.

The receiver runs in a UTS namespace of its own (its own host name) under libfaketime (its wall
clock +500 ms; the monotonic clock left alone), the sender and the coordinator on this host. The
known answer: through RabbitMQ on loopback a message takes about a millisecond, so uncorrected
the median would read ~501 ms; corrected it must be that millisecond, within the correction's
stated uncertainty. The skew is ten times what it was at first: with 50 ms and a 20 ms bound, a
busy shared machine's p99 (24 ms once in CI) tripped the bound though the correction was right.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support.processes import BIN, Daemons
from support.runs import run_with

from coordinator import Fail, FixedRateTest

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("mosquitto_url", "rabbitmq")]

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEW_S = 0.500


def _start_skewed_receiver(daemons: Daemons, name: str) -> None:
    """`maestro-worker --role receiver` on host "skewed-host" with its clock 500 ms ahead."""
    worker = [str(BIN / "maestro-worker"), "--broker", daemons.broker_url, "--name", name]
    worker += ["--topic-prefix", daemons.prefix, "--data-dir", str(daemons.log_dir / name), "--role", "receiver"]
    inner = "hostname skewed-host && exec env " + " ".join(
        [f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME=+{SKEW_S}", "FAKETIME_DONT_FAKE_MONOTONIC=1", *worker]
    )
    with (daemons.log_dir / f"{name}.log").open("ab") as log:
        daemons.procs[name] = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", inner], stdout=log, stderr=subprocess.STDOUT
        )


# Quiet: the receiver judges each second's p99 against 200 ms, so one 1/3 s stall of a loaded
# machine (p99 334 ms in a CI run beside another test) fails it, whatever the clocks say.
@pytest.mark.quiet
@pytest.mark.timeout(300)
def test_every_figure_carries_the_latency_corrected_for_a_receiver_clock_500_ms_ahead(
    daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    assert LIBFAKETIME.is_file() and shutil.which("unshare"), "libfaketime (apt faketime) and unshare are needed"
    url, root = data_server
    _start_skewed_receiver(daemons, "r-skewed")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/skew-{uuid.uuid4().hex[:8]}",
        rate=100,
        duration="5s",
        # The receiver's own bound judges corrected latency too: the skew alone would trip it.
        fail=Fail(max_loss_ratio=0.0, latency_ms=200),
    )
    result = run_with(daemons, url, test, peers=2)
    assert result.passed, result.reason
    hosts = {p["name"]: p["host"] for p in result.record["peers"]}
    assert hosts["r-skewed"] == "skewed-host" and hosts["s1"] != "skewed-host"
    (receiver,) = [p for p in result.summary["peers"] if p["role"] == "receiver"]
    # The measured shift is the skew, to within the uncertainty the figures state.
    shift_us, uncertainty_us = receiver["latency_correction_us"], receiver["latency_uncertainty_us"]
    assert abs(shift_us + SKEW_S * 1e6) <= uncertainty_us + 1000, receiver
    # The corrected p50: the path's few milliseconds, give or take the offset's uncertainty (a
    # loaded machine measures the offset less tightly), and nowhere near the 500 ms skew.
    p50_us = result.summary["latency_us"]["p50"]
    assert 0 < p50_us < 10_000 + uncertainty_us, f"p50 {p50_us} µs (± {uncertainty_us} µs): the skew is still in it"

    # The same figures everywhere: printed, junit.xml, test.json, and the report's summary.json.
    assert f"latency p50 {p50_us / 1000:.3f} ms" in str(result)
    test_dir = root / result.test_id
    stored = json.loads((test_dir / "test.json").read_text())
    assert stored["summary"]["latency_us"] == result.summary["latency_us"]
    junit = (test_dir / "junit.xml").read_text()
    assert f"p99_us={result.summary['latency_us']['p99']:.0f}" in junit
    report = subprocess.run(
        [sys.executable, "-m", "reports", "report", str(root), result.test_id],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    # A quiet console (#16 item 4): one line for Spark, the JVM's own output in a log file.
    console = (report.stdout + report.stderr).splitlines()
    (spark_line,) = [line for line in console if "spark" in line.lower()]
    assert spark_line.startswith("report: spark session up in ")
    assert spark_line.endswith(f" s (its log: {root}/.logs/spark.log)")
    assert not [line for line in console if "log4j" in line or "WARN" in line or "NativeCodeLoader" in line]
    assert "log4j" in (root / ".logs" / "spark.log").read_text()
    reported = json.loads((test_dir / "report" / "summary.json").read_text())
    assert reported["latency_us"] == result.summary["latency_us"]

"""An A-B-A test for real: baseline, candidate, baseline again through RabbitMQ on one set of
daemons, judged by `maestro aba` and in the series' report (#39)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from support.processes import BIN
from support.proxy_process import ProxyProcess

from coordinator import AbaTest, FixedRateTest, Maestro
from coordinator.running.local import LocalCluster
from protocol.test_record import TestRecord

DELAY_MS = 20


def _aba(results: Path, test_id: str, *thresholds: str) -> subprocess.CompletedProcess[str]:
    where = [] if "--server" in thresholds else ["--results", str(results)]
    return subprocess.run(
        [str(BIN / "maestro"), "aba", test_id, *where, "--json", *thresholds],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.rabbitmq
@pytest.mark.embedded_broker
@pytest.mark.quiet  # judges latencies: a neighbour starting half way moves a leg's tail
@pytest.mark.timeout(420)  # 18 runs of 2 s with their ends, and two verdicts: 110 s alone
def test_a_candidate_through_a_20_ms_proxy_is_a_regression_and_the_same_build_passes(tmp_path: Path) -> None:
    """Three runs a leg at 40 msg/s. The candidate's sender goes through a proxy adding 20 ms: its
    p50 rises by about that against both baselines, a REGRESSION under fractions and noise units.
    The baseline against itself: PASS in noise units (a fixed 10 % is inside the noise of three
    runs of a 1-4 ms p50, which says INCONCLUSIVE, never PASS)."""
    results = tmp_path / "results"
    queue = f"maestro-aba-{uuid.uuid4().hex[:8]}"
    direct = f"amqp://guest:guest@127.0.0.1:5672/{queue}"
    base = FixedRateTest(send_url=direct, receive_url=direct, rate=40, duration="2s", name=f"aba {queue}")
    with ProxyProcess(5672) as proxy, Maestro.local(data=results) as m:
        proxy.set_latency(DELAY_MS)
        slower = dataclasses.replace(base, send_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}/{queue}")
        delayed = m.run(AbaTest(base=base, candidate=slower, times=3), progress=False)
        same = m.run(AbaTest(base=base, candidate=base, times=3), progress=False)
    for result in (delayed, same):
        record = TestRecord.from_text((results / result.test_id / "test.json").read_text())
        assert record.kind == "aba" and record.outcome == "success", record.reason
        labels = [row.test_id.removeprefix(f"{result.test_id}.") for row in record.steps or ()]
        assert labels == ["a1-01", "a1-02", "a1-03", "b-01", "b-02", "b-03", "a2-01", "a2-02", "a2-03"]
        # No leg is a run of the test's history: the baseline and the candidate share its name.
        assert all(phase.record.repetition is None for phase in result.steps)

    judged = _aba(results, delayed.test_id)
    assert judged.returncode == 3, judged.stdout + judged.stderr
    verdict = json.loads(judged.stdout)
    assert verdict["verdict"] == "REGRESSION"
    p50 = next(f for f in verdict["findings"] if f.startswith("Latency p50 rose "))
    assert "the candidate's mean against both baselines'" in p50
    # The means in the finding: the candidate's p50 is the baselines' plus the delay, give or
    # take their spread and the proxy's own time.
    means = dict(part.rsplit(" ", 1) for part in p50.split("(", 2)[2].split(" ms;")[0].split(", "))
    first, candidate, second = (float(means[k]) for k in ("first baseline", "candidate", "second baseline"))
    assert DELAY_MS - 2 < candidate - (first + second) / 2 < DELAY_MS + 3, p50
    assert judged.stderr.strip().splitlines()[-1].startswith("aba: REGRESSION: ")
    assert _aba(results, delayed.test_id, "--max-latency-rise", "3sigma").returncode == 3

    passed = _aba(results, same.test_id, "--max-latency-rise", "3sigma", "--max-throughput-drop", "3sigma")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "aba: PASS: the candidate is within every threshold of both baselines" in passed.stderr
    fixed = _aba(results, same.test_id)
    assert fixed.returncode in (0, 5) and "REGRESSION" not in fixed.stderr, fixed.stderr

    # A test that is no A-B-A one, and one that is not there: one line each, exit 2.
    phase = _aba(results, f"{same.test_id}.a1-01")
    assert phase.returncode == 2 and phase.stderr.strip().endswith("is a fixed-rate test, not an A-B-A one")
    outside = _aba(results, "../results")
    assert outside.returncode == 2 and "test id '../results': use letters" in outside.stderr
    missing = _aba(results, "no-such-test")
    assert missing.returncode == 2 and missing.stderr.strip() == f"maestro aba: no test 'no-such-test' in {results}"

    # A nightly job whose coordinator does not hold the results reads them from the data server:
    # the same verdict, the same code.
    with LocalCluster(tmp_path / "server-logs", broker_url="unused") as local:
        server = local.data_server(results)
        remote = _aba(results, delayed.test_id, "--server", server)
        absent = _aba(results, "no-such-test", "--server", server)
    remote_verdict = json.loads(remote.stdout)
    assert remote.returncode == 3 and remote_verdict["why"] == verdict["why"], remote.stderr
    assert absent.returncode == 2 and f"no test 'no-such-test' on {server}" in absent.stderr

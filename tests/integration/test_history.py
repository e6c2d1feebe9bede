"""`maestro history` over real runs, and its page on the data server as a browser draws it."""

from __future__ import annotations

import csv
import http.server
import json
import re
import subprocess
import threading
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.browser import artifacts_dir, drawn_page
from support.processes import BIN
from support.proxy_process import ProxyProcess
from support.synthetic import history_run

from coordinator.running.local import LocalCluster


def maestro(*args: str, cwd: Path, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "maestro"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


# How many runs a change point needs. E-divisive's permutation test (reports/change_points.py)
# shuffles the counted runs 199 times (seed 0) and gives a split p = (1 + the shuffles whose best
# split is as strong) / 200. When the delayed runs stand apart from the others, a shuffle is as
# strong when it puts them all at one end: 2 of the C(n, k) ways to place k among n. Five runs can
# never show a change lasting two runs at p <= 0.01 (2 of C(5, 2) = 10 ways: a fifth of the
# shuffles match); 7 + 3 (2 of 120) had 4 matching shuffles, p = 0.025; 7 + 4 (2 of 330) has
# none, p = 0.005, the least a split can have.
UNDELAYED_RUNS, DELAYED_RUNS = 7, 4
DELAY_MS = 20
# Thresholds in noise units: a fixed one must be wider than the noise band of six runs, 15.6 of
# their sigmas (reports.verdict.band_sigmas), or the gate says INCONCLUSIVE instead of PASS, and
# no fixed latency threshold is both that wide and narrower than the 20 ms a change point must
# show. Undelayed runs here (40 msg/s for 2 s, other agents' tests beside them) had
# p50 1.5-4.4 ms, p99 2.3-33 ms and p99.9 5.4-40 ms: 3 sigma of six runs reached 23 %, 91 % and
# 109 %, and one run's p99.9 1.7 times their median. The slowest of the 80 was nearly always the
# message that came as the receiver's first report held its loop 27 ms (protocol.hdr's bucket
# middles, made then); since, alone: p99 1.5-2.7 ms, p99.9 3.0-7.6 ms. 20 ms more on a p50 of
# 1-4 ms is a rise of 500-2,000 %.
THRESHOLD = "3sigma"


def _generator_bound(record: dict[str, Any]) -> bool:
    return any(peer.get("generator_bound") for peer in record["summary"]["peers"])


class _Runs:
    """Runs of one test named `name` in `folder`, its receivers straight on RabbitMQ, and the
    history and gate of them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = f"history {uuid.uuid4().hex[:6]}"
        self.queue = f"maestro-history-{uuid.uuid4().hex[:8]}"
        self.direct = f"amqp://guest:guest@127.0.0.1:5672/{self.queue}"
        self.test_ids: list[str] = []  # every run, oldest first
        self.counted: list[str] = []  # those the detection counts

    def run(self, send_url: str) -> None:
        """One run that counts. A run whose record marks its sender generator-bound (a CI machine
        busy with other tests makes one so now and then) is listed and left out of the
        detection, so another takes its place."""
        for _ in range(3):
            done = maestro(
                "test", "fixed-rate", "--local", "--send-url", send_url, "--receive-url", self.direct,
                "--rate", "40", "--duration", "2s", "--name", self.name, "--quiet", "--no-report", cwd=self.folder,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            test_id = next(line.split()[-1] for line in done.stdout.splitlines() if line.startswith("test id:"))
            self.test_ids.append(test_id)
            if not _generator_bound(self.record(test_id)):
                self.counted.append(test_id)
                return
        pytest.fail(f"three runs in a row generator-bound: {self.test_ids[-3:]}")

    def record(self, test_id: str) -> dict[str, Any]:
        record: dict[str, Any] = json.loads((self.folder / "results" / test_id / "test.json").read_text())
        return record

    def gate(self) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        listed = maestro(
            "history", self.name, "--results", "results", "--gate", "--json",
            "--max-latency-rise", THRESHOLD, "--max-throughput-drop", THRESHOLD,
            cwd=self.folder,
        )  # fmt: skip
        history = json.loads(listed.stdout)
        assert [r["test_id"] for r in history["runs"]] == self.test_ids  # oldest first
        return listed, history


@pytest.mark.rabbitmq
@pytest.mark.embedded_broker
# Judges latency figures run after run: a neighbour that starts half way shifts the tail figures
# of the runs after it (a p99.9 from 11.7 to 7.0 ms, at p = 0.005, in a run beside other agents'
# tests), and that is a change point too. Alone, the runs differ only by the delay.
@pytest.mark.quiet
@pytest.mark.timeout(420)  # twelve runs or more and a data server: 170 s beside other agents' tests
def test_real_runs_make_a_history_whose_gate_finds_an_added_delay(tmp_path: Path) -> None:
    """Seven runs straight to RabbitMQ, then four whose sender goes through a proxy adding 20 ms
    (the workload identity ignores a URL's host and port: the same test): too few runs to judge
    after five, a pass after seven, a regression from the first delayed run after eleven."""
    runs = _Runs(tmp_path)
    for _ in range(5):
        runs.run(runs.direct)
    # Another test in the same folder is not part of this one's history.
    other = maestro(
        "test", "fixed-rate", "--local", "--send-url", runs.direct, "--rate", "10", "--duration", "1s",
        "--name", "something else", "--quiet", "--no-report", cwd=tmp_path,
    )  # fmt: skip
    assert other.returncode == 0, other.stdout + other.stderr
    listed, history = runs.gate()
    # Four counted runs before the newest: too few to judge it, and the gate says so (exit 5).
    assert listed.returncode == 5, listed.stdout + listed.stderr
    assert all(cps == [] for cps in history["change_points"].values())
    newest = runs.counted[-1]
    assert f"gate: INCONCLUSIVE: 4 comparable runs, 5 needed (same name, workload and testbed as {newest})" in (
        listed.stderr
    )

    for _ in range(UNDELAYED_RUNS - 5):
        runs.run(runs.direct)
    listed, history = runs.gate()
    # Six alike before the newest, no change among them, each figure's noise inside its threshold.
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert all(cps == [] for cps in history["change_points"].values())
    assert f"gate: PASS: {runs.counted[-1]} is within every threshold of 6 comparable runs" in listed.stderr

    with ProxyProcess(5672) as proxy:
        proxy.set_latency(DELAY_MS)
        for _ in range(DELAYED_RUNS):
            runs.run(f"amqp://guest:guest@127.0.0.1:{proxy.port}/{runs.queue}")
    listed, history = runs.gate()
    assert listed.returncode == 3, listed.stdout + listed.stderr
    first_delayed = runs.counted[UNDELAYED_RUNS]
    at = runs.test_ids.index(first_delayed) + 1
    shifts = history["change_points"]
    (p50,) = shifts["latency_p50_us"]
    assert (p50["test_id"], p50["run"], p50["p_value"]) == (first_delayed, at, 0.005), p50
    # The tail may change too, at the same run; nothing else changes, anywhere.
    assert all(s["test_id"] == first_delayed for figure in shifts.values() for s in figure), shifts
    assert shifts["receive_rate"] == shifts["loss_ratio"] == shifts["duplicate_ratio"] == []
    # Every message took the delay, so the median moved by the delay itself, give or take how
    # far each phase's own p50s spread (the noise of either mean is within it) and up to 0.5 ms
    # of the proxy's own time.
    p50s = {r["test_id"]: r["figures"]["latency_p50_us"] for r in history["runs"]}
    spread = sum(
        max(p50s[t] for t in phase) - min(p50s[t] for t in phase)
        for phase in (runs.counted[:UNDELAYED_RUNS], runs.counted[UNDELAYED_RUNS:])
    )
    assert -spread <= p50["after"] - p50["before"] - DELAY_MS * 1000 <= spread + 500, (p50, spread)
    assert "gate: REGRESSION: Latency p50 rose " in listed.stderr
    assert f" from run {at} ({first_delayed}) on: " in listed.stderr, listed.stderr
    assert ", p = 0.005 (a change point)" in listed.stderr
    _check_listed(runs, history, at, first_delayed)


def _check_listed(runs: _Runs, history: dict[str, Any], at: int, first_delayed: str) -> None:
    """Each run as its test.json has it, in the table too, and from a data server the same."""
    for row in history["runs"]:
        record = runs.record(row["test_id"])
        assert row["outcome"] == "success"
        assert row["excluded"] == ("generator-bound" if _generator_bound(record) else None)
        assert row["testbed"] and row["testbed"] == history["runs"][0]["testbed"]  # test.json's, as it started
        assert row["workload"] and row["workload"] == history["runs"][0]["workload"]  # the proxy's port aside
        assert row["figures"]["receive_rate"] == record["summary"]["receive_rate"]["mean"]
        assert row["figures"]["latency_p99_us"] == record["summary"]["latency_us"]["p99"]
        assert row["figures"]["loss_ratio"] == 0.0

    table = maestro("history", runs.name, "--results", "results", cwd=runs.folder)
    assert table.returncode == 0, table.stderr
    assert all(test_id in table.stdout for test_id in runs.test_ids)
    assert f"change point in Latency p50: at run {at} ({first_delayed})" in table.stdout

    with LocalCluster(runs.folder / "logs", broker_url="unused") as local:
        url = local.data_server(runs.folder / "results")
        served = maestro("history", runs.name, "--server", url, "--json", cwd=runs.folder)
        assert served.returncode == 0, served.stderr
        assert json.loads(served.stdout)["runs"] == history["runs"]
        assert json.loads(served.stdout)["change_points"] == history["change_points"]
        missing = maestro("history", "no such test", "--server", url, cwd=runs.folder)
        assert missing.returncode == 2 and "no finished run of a test named 'no such test'" in missing.stderr
        # A gate on it cannot judge: it says so, it does not pass.
        gated = maestro("history", "no such test", "--server", url, "--gate", cwd=runs.folder)
        assert gated.returncode == 5 and gated.stderr.strip().endswith("gate: INCONCLUSIVE: no finished run")


@pytest.mark.rabbitmq
@pytest.mark.embedded_broker
@pytest.mark.timeout(240)
def test_a_repeated_tests_history_is_its_repetitions(tmp_path: Path) -> None:
    """Two nights of a repeated test, twice each: its history is the four repetitions, each a
    run of the one workload with its own figures (the parent, which has none, is no run), and
    a gate on it judges them, not "no finished run"."""
    name, queue = f"repeated {uuid.uuid4().hex[:6]}", f"maestro-repeated-{uuid.uuid4().hex[:8]}"
    parents = []
    for _ in range(2):
        done = maestro(
            "test", "repeated", "--times", "2", "--local", "--send-url", f"amqp://guest:guest@127.0.0.1:5672/{queue}",
            "--rate", "20", "--duration", "1s", "--name", name, "--quiet", "--no-report", cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        parents.append(next(line.split()[-1] for line in done.stdout.splitlines() if line.startswith("test id:")))
    listed = maestro("history", name, "--results", "results", "--gate", "--json", cwd=tmp_path)
    history = json.loads(listed.stdout)
    assert [r["test_id"] for r in history["runs"]] == [f"{p}.run0{n}" for p in parents for n in (1, 2)]
    assert all(r["figures"]["receive_rate"] == pytest.approx(20, rel=0.05) for r in history["runs"])
    assert len({r["workload"] for r in history["runs"]}) == 1
    # Three comparable runs before the newest: too few, and the gate says that, not "no finished run".
    assert listed.returncode == 5, listed.stderr
    assert "gate: INCONCLUSIVE: 3 comparable runs, 5 needed" in listed.stderr


@pytest.mark.rabbitmq
@pytest.mark.embedded_broker
@pytest.mark.timeout(240)
def test_a_calibration_gives_the_next_night_a_noise_to_be_judged_against(tmp_path: Path) -> None:
    """`maestro test --calibrate 5` (#39): five runs of the test, each a run of its history, whose
    noise `maestro history --noise` shows; the next night of the same workload is judged against
    them (not "0 comparable runs, 5 needed")."""
    name, queue = f"calibrated {uuid.uuid4().hex[:6]}", f"maestro-calibrated-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:5672/{queue}"
    common = (
        "--local",
        "--send-url",
        url,
        "--rate",
        "20",
        "--duration",
        "1s",
        "--name",
        name,
        "--quiet",
        "--no-report",
    )
    calibrated = maestro("test", "fixed-rate", *common, "--calibrate", "5", cwd=tmp_path)
    assert calibrated.returncode == 0, calibrated.stdout + calibrated.stderr
    noise = maestro("history", name, "--results", "results", "--noise", cwd=tmp_path)
    assert noise.returncode == 0, noise.stderr
    rate = next(line for line in noise.stdout.splitlines() if line.strip().startswith("Receive rate"))
    assert rate.split()[2] == "5", noise.stdout  # its five runs
    night = maestro("test", "fixed-rate", *common, cwd=tmp_path)
    assert night.returncode == 0, night.stdout + night.stderr
    gated = maestro(
        "history", name, "--results", "results", "--gate", "--max-throughput-drop", "3sigma",
        "--max-latency-rise", "3sigma", cwd=tmp_path,
    )  # fmt: skip
    assert "comparable runs, 5 needed" not in gated.stderr, gated.stderr
    assert gated.returncode == 0, gated.stderr
    assert "is within every threshold of 5 comparable runs" in gated.stderr.splitlines()[-1]


def test_the_history_page_marks_a_change_point_in_a_browser(tmp_path: Path) -> None:
    """Thirty nights with a 10 % drop from night 20, served by `maestro serve` and drawn by
    headless Chromium: a chart per figure, the change point marked, whole dated run ticks, y axes
    from 0, points that open their runs, no script error. Screenshot kept."""
    root = tmp_path / "results"
    root.mkdir()
    rates = 10_000 * (1 + np.random.default_rng(3).uniform(-0.02, 0.02, 30))
    rates[20:] *= 0.9
    for night, rate in enumerate(rates):
        history_run(root, "nightly rabbitmq", night, float(rate), outcome="failure" if night == 11 else "success")
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        url = local.data_server(root)
        page_url = f"{url}/history/{urllib.parse.quote('nightly rabbitmq')}"
        page = drawn_page(page_url, "history.png", height=2600)
    assert "data-js-errors" not in page, page.split("data-js-errors")[1][:300]
    assert page.count('class="history-chart"') == 6
    assert page.count('class="main-svg"') >= 6  # each chart drew
    # Run ticks: whole, dated (latency's y axis, in ms, has halves of its own).
    run_ticks = [t for g in re.findall(r'<g class="xtick">(.*?)</g>', page) for t in re.findall(r">([^<]+)<", g)]
    assert "2026-10-01" in run_ticks and "28" in run_ticks, run_ticks
    assert all(t.isdigit() or t.startswith("2026-10-") for t in run_ticks), run_ticks
    assert r'"customdata":["\u002fresults\u002fnightly-rabbitmq-000"' in page  # points open their runs
    # The change point, and its size over the runs that count (night 11 failed: left out).
    before = np.mean([r for night, r in enumerate(rates[:20]) if night != 11])
    change = 100 * (np.mean(rates[20:]) - before) / before
    assert f"<td>nightly-rabbitmq-020</td><td>{before:,.1f}</td>" in page and f"<td>{change:.2f}</td>" in page
    assert "failed" in page
    assert (artifacts_dir() / "history.png").stat().st_size > 10_000


def test_a_gate_exports_for_other_tools_and_calls_its_webhook_on_a_regression(tmp_path: Path) -> None:
    """#39: twelve nights, the last two 20 % slower: the gate says REGRESSION (exit 3), Otava's
    CSV and Bencher's BMF are written, and the webhook, whose URL is read from a file of mode 600,
    gets the verdict; a webhook file others may read is refused before anything runs."""
    root = tmp_path / "results"
    rates = [10_000.0, 10_150.0, 9_900.0, 10_050.0, 9_950.0, 10_100.0, 9_980.0, 10_020.0, 10_070.0, 9_930.0]
    rates += [8_000.0, 8_050.0]
    ids = [history_run(root, "nightly", night, rate) for night, rate in enumerate(rates)]
    received: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hook_file = tmp_path / "hook.url"
    hook_file.write_text(f"http://127.0.0.1:{server.server_port}/services/T0/B0/secret\n")
    try:
        hook_file.chmod(0o644)
        refused = maestro("history", "nightly", "--gate", "--webhook-file", str(hook_file), cwd=tmp_path)
        assert refused.returncode == 2 and "may be read by others (mode 0644)" in refused.stderr, refused.stderr
        hook_file.chmod(0o600)
        url = hook_file.read_text()
        hook_file.write_text("file:///etc/passwd\n")  # urllib would "POST" to a file
        refused = maestro("history", "nightly", "--gate", "--webhook-file", str(hook_file), cwd=tmp_path)
        assert refused.returncode == 2 and "is no http:// or https:// URL" in refused.stderr, refused.stderr
        hook_file.write_text(url)
        gated = maestro(
            "history", "nightly", "--gate", "--webhook-file", str(hook_file), "--webhook-format", "slack",
            "--export", "otava:out/nightly.csv", "--export", "bencher:-", cwd=tmp_path,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert gated.returncode == 3, gated.stdout + gated.stderr
    assert "gate: REGRESSION: Receive rate" in gated.stderr and "webhook sent" in gated.stderr
    assert "secret" not in gated.stderr + gated.stdout  # the webhook's URL is its password
    assert json.loads(gated.stdout) == {
        "nightly: Receive rate": {"throughput": {"value": 8050.0}},
        "nightly: Latency p50": {"latency": {"value": 500_000.0}},
        "nightly: Latency p99": {"latency": {"value": 2_000_000.0}},
        "nightly: Latency p99.9": {"latency": {"value": 4_000_000.0}},
        "nightly: Loss (lost / sent)": {"loss-ratio": {"value": 0.0}},
        "nightly: Duplicates (duplicates / sent)": {"duplicate-ratio": {"value": 0.0}},
    }
    rows = list(csv.DictReader((tmp_path / "out" / "nightly.csv").read_text().splitlines()))
    assert [r["test_id"] for r in rows] == ids and [float(r["receive_rate"]) for r in rows] == rates
    (message,) = [json.loads(body) for body in received]
    assert message["text"].startswith("*maestro* nightly: *REGRESSION*: Receive rate")
    assert f"/results/{ids[-1]}/report/index.html|report>" in message["text"]

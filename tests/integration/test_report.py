"""`maestro report` with the real PySpark on folders with known answers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.synthetic import T0_US, one_loss_one_duplicate

from reports.report import SUMMARY_KEYS, build_report
from reports.series import rate_series, spark_session


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session()
    yield session
    session.stop()


def test_the_report_of_a_known_folder(spark: Any, tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    (test / "test.json").write_text(json.dumps({"outcome": "failure", "reason": "lost 1 of 40", "kind": "fixed-rate"}))
    out = build_report(spark, test)
    summary = json.loads((out / "summary.json").read_text())
    assert tuple(summary) == SUMMARY_KEYS  # exactly DESIGN.md's keys, in its order
    assert (summary["sent"], summary["received"], summary["lost"], summary["duplicates"]) == (40, 39, 1, 1)
    assert (summary["outcome"], summary["reason"]) == ("failure", "lost 1 of 40")
    assert summary["send_rate"] == {"mean": 10.0, "min": 10.0, "max": 10.0}
    assert summary["latency_us"]["p50"] == pytest.approx(476_000, rel=1e-3)
    page = (out / "index.html").read_text()
    assert '<script src="plotly.min.js"></script>' in page and (out / "plotly.min.js").stat().st_size > 1_000_000
    assert "http://" not in page.split("<body>")[1].split("plotly")[0]  # no CDN before the charts load
    assert "Loss and duplicates per sender" in page and "<td>s1/0</td><td>40</td><td>39</td><td>1</td>" in page


def test_per_second_rates_from_spark_are_exact(spark: Any, tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    rates, rows = rate_series(spark, test)
    t0 = T0_US // 1_000_000
    # Sends at T0 + 0.25 s + i x 0.1 s, i < 40 (ata 10 µs later): 8, 10, 10, 10 and 2 per second.
    assert rates[("sender", "s1")] == {t0: 8, t0 + 1: 10, t0 + 2: 10, t0 + 3: 10, t0 + 4: 2}
    assert rows == 40 + 40  # 40 sent, 20 + 20 received rows


def test_maestro_report_cli_writes_reports_and_the_index(tmp_path: Path) -> None:
    one_loss_one_duplicate(tmp_path, "t1")
    one_loss_one_duplicate(tmp_path, "t2")
    run = subprocess.run(
        [sys.executable, "-m", "coordinator", "report", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    for name in ("t1", "t2"):
        assert (tmp_path / name / "report" / "summary.json").exists()
    index = (tmp_path / "index.html").read_text()
    assert 'href="t1/report/index.html"' in index and 'href="t2/report/index.html"' in index
    bad = subprocess.run(
        [sys.executable, "-m", "coordinator", "report", str(tmp_path), "../etc"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "test id" in bad.stderr and "Traceback" not in bad.stderr

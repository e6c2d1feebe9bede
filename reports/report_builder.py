"""`python -m reports builder ROOT`: the data server's report builder, a process that builds the
reports of the test ids it reads on stdin, one at a time, with one Spark session for them all.

A `maestro report` run pays for its JVM every time: some 2.5 s to start and 3.6 s more before
its first job runs at speed (bench/HISTORY.md), which is most of a 30 M-record report. The data
server keeps this process while reports are asked for, so the second report and those after it
start at once. Each answer ends with a line `BUILT <test id>` or `FAILED <test id>`; the lines
before it are the build's output (a failure's traceback). After a failure the process ends, so
that the next report starts from a fresh JVM rather than one in an unknown state.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from reports.paths import resolve_inside

__all__ = ["BUILT", "FAILED", "SPARK_UP", "run_builder", "told_session"]

BUILT, FAILED = "report-builder: built", "report-builder: failed"
SPARK_UP = "report: spark session up"


def told_session(master: str | None, jvm_log: Path | None, out: TextIO) -> Any:
    """A Spark session, and the one console line a report run shows for it (`SPARK_UP`, which
    the data server's queue reads as the end of the "starting Spark" step)."""
    from reports.time_series import spark_session  # noqa: PLC0415 - Spark only here

    # The JVM takes seconds to start, with nothing else to show meanwhile: say that it is starting.
    print("report: starting spark (its JVM: a few seconds)", file=out, flush=True)
    started = time.monotonic()
    spark = spark_session(master, jvm_log)
    where = f" (its log: {jvm_log})" if jvm_log else ""
    print(f"{SPARK_UP} in {time.monotonic() - started:.1f} s{where}", file=out, flush=True)
    return spark


def run_builder(root: Path, test_ids: Iterable[str], out: TextIO = sys.stdout) -> int:
    """Build each test's report and the index; 0 once `test_ids` ends, 1 after a failure."""
    from reports.baseline import Thresholds  # noqa: PLC0415 - Spark and Plotly only here
    from reports.report import build_index, build_report  # noqa: PLC0415

    spark: Any = None
    try:
        for line in test_ids:
            test_id = line.strip()
            if not test_id:
                continue
            try:
                if spark is None:
                    spark = told_session(None, root / ".logs" / "spark.log", out)
                folder, _ = build_report(spark, resolve_inside(root, test_id), None, Thresholds())
                build_index(root)
                print(f"report: {folder / 'index.html'}", file=out)
                print(f"{BUILT} {test_id}", file=out, flush=True)
            except Exception:
                traceback.print_exc(file=out)
                print(f"{FAILED} {test_id}", file=out, flush=True)
                return 1
        return 0
    finally:
        if spark is not None:
            spark.stop()

"""The time series of a test: messages per second per peer (Spark, over the rotated rate files in
parallel), latency percentiles per second (from the HDR interval logs), inspector columns.

Spark runs local[*] by default; `--master` points it at a cluster, whose executors must then
see the results folder at the same path (a shared filesystem).
"""

from __future__ import annotations

import csv
import logging
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from protocol.hdr import new_histogram, read_intervals
from protocol.ratefile import arrivals_per_second
from reports.clocks import Correction, shifted
from reports.summary import Peers

__all__ = ["inspector_tables", "latency_series", "rate_series", "spark_session"]

log = logging.getLogger(__name__)

PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)


def spark_session(master: str | None = None, jvm_log: Path | None = None) -> Any:
    """One session per `maestro report` run, reused across its tests. `jvm_log`: where the JVM's
    own output goes (its log4j banner, its warnings), instead of the console."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else Spark binds to eth0's address
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The JVM starts only when a report is made.
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    conf = (
        SparkConf()
        .setAppName("maestro-report")
        .setMaster(master or "local[*]")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.memory", "1g")
    )
    if jvm_log is not None and SparkContext._active_spark_context is None:
        jvm_log.parent.mkdir(parents=True, exist_ok=True)
        with jvm_log.open("ab") as out:  # the JVM keeps its own copy of the descriptor
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        SparkContext(conf=conf, gateway=gateway)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _count_file(item: tuple[str, str, str]) -> tuple[str, str, dict[int, int]]:
    """Runs on an executor: one rate file -> (role, peer, messages by second), counted in C."""
    role, peer, path = item
    return role, peer, dict(arrivals_per_second(Path(path).read_bytes(), path))


def rate_files(peers: Peers) -> list[tuple[str, str, str]]:
    """(role, peer, path) of every sender's and receiver's rate file."""
    return [
        (info.get("role", ""), info.get("name", ""), str(directory / name))
        for directory, info in peers
        if info.get("role") in ("sender", "receiver")
        for name in info.get("files", [])
        if name.endswith(".csv.gz")
    ]


def rate_series(spark: Any, peers: Peers) -> tuple[dict[tuple[str, str], dict[int, int]], int]:
    """Messages per second by (role, peer), and the rows read."""
    files = rate_files(peers)
    if not files:
        return {}, 0
    # Two tasks per core, each a share of the files (a task per file spent more on the task than
    # on the file), and no shuffle: each file's counts are a few hundred seconds, merged here.
    context = spark.sparkContext
    tasks = min(len(files), 2 * context.defaultParallelism)
    per_file = context.parallelize(files, numSlices=tasks).map(_count_file).collect()
    rates: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    rows = 0
    for role, peer, counts in per_file:
        series = rates[(role, peer)]
        for second, count in counts.items():
            series[second] = series.get(second, 0) + count
            rows += count
    return dict(rates), rows


def latency_series(test_dir: Path, corrections: dict[str, Correction]) -> dict[str, dict[int, dict[str, float]]]:
    """Per second, all receivers merged: percentiles of the corrected and the service latency
    (µs), with the clock corrections across hosts that the summary applies."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for kind, name in (("corrected", "receiver-latency.hlog"), ("service", "receiver-service-latency.hlog")):
        merged: dict[int, Any] = {}
        for path in sorted(test_dir.glob(f"receiver/*/{name}")):
            correction = corrections.get(path.parent.name)
            for interval in read_intervals(path):
                second = interval.get_start_time_stamp() // 1000
                moved, _ = shifted(interval, correction.shift_us if correction else 0.0)
                merged.setdefault(second, new_histogram()).add(moved)
        out[kind] = {
            second: {
                **{f"p{p:g}": float(h.get_value_at_percentile(p)) for p in PERCENTILES},
                "max": float(h.get_max_value()),
                "count": float(h.get_total_count()),
            }
            for second, h in sorted(merged.items())
            if h.get_total_count()
        }
    return out


def inspector_tables(test_dir: Path) -> dict[str, list[dict[str, str]]]:
    """Each inspector CSV by `peer/file`, as rows."""
    tables = {}
    for path in sorted(test_dir.glob("inspector/*/*.csv")):
        with path.open(newline="") as f:
            tables[f"{path.parent.name}/{path.stem}"] = list(csv.DictReader(f))
    return tables

"""The time series of a test: messages per second per peer and the corrected latency's
percentiles per second (Spark, over the rotated rate files in parallel), the service latency's
percentiles per second (from the HDR interval logs: the rate files do not hold the send time),
inspector columns.

Spark reads the rate files with the DataFrame API: each task decodes its share of the files to
columns with numpy and counts them into cells, (role, peer, second, bucket, count), handed to
Spark as Arrow record batches (`mapInArrow`). A cell counts either arrivals (`bucket` -1) or a
receiver's messages whose latency (arrival minus intended send, moved by the receiver's clock
correction) falls in one bucket of the HDR histogram's counts array. Spark adds the cells up
(`groupBy().sum()`): the rates per peer and second, and the latency buckets per second across
receivers, from which the percentiles are read exactly as from an HDR histogram of the same
messages. No Python runs per row on this path.

Spark runs local[*] by default; `--master` points it at a cluster, whose executors must then
see the results folder at the same path (a shared filesystem).
"""

from __future__ import annotations

import csv
import logging
import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protocol.hdr import HIGHEST_US, LOWEST_US, bucket_indexes, histogram_of, new_histogram, read_intervals
from protocol.ratefile import rate_columns
from reports.clocks import Correction, left_to_shift, shifted
from reports.jvm_archive import archive_options, cache_dir
from reports.summary import Peers

__all__ = [
    "Series",
    "figures_of",
    "file_listing",
    "inspector_tables",
    "latency_series",
    "rate_files",
    "report_series",
    "spark_session",
]

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
        # The aggregations' results are a few thousand cells: Spark's default of 200 shuffle
        # partitions would be 200 tasks of nearly nothing each.
        .set("spark.sql.shuffle.partitions", "4")
    )
    # Options for the JVM about to start; a JVM this process started already stays (PySpark
    # keeps its gateway after a session stops), and its options with it.
    if SparkContext._gateway is None and (options := archive_options(cache_dir())):
        conf.set("spark.driver.extraJavaOptions", " ".join(options))
    if jvm_log is not None and SparkContext._active_spark_context is None:
        jvm_log.parent.mkdir(parents=True, exist_ok=True)
        with jvm_log.open("ab") as out:  # the JVM keeps its own copy of the descriptor
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        SparkContext(conf=conf, gateway=gateway)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# A receiver's clock correction as its knots, µs: "t1,t2,...;s1,s2,..." (empty: none).
_FILES = "role string, peer string, path string, shift string"
_CELLS = "role string, peer string, second long, bucket long, count long"
_ARRIVALS = -1  # the bucket of a cell that counts arrivals, not latencies
_COUNTS_LEN = new_histogram().counts_len  # buckets of one second's histogram

LatencySeries = dict[int, dict[str, float]]


@dataclass
class Series:
    rates: dict[tuple[str, str], dict[int, int]]  # messages per second by (role, peer)
    rows: int  # rate-file rows read
    corrected: LatencySeries  # per second (of arrival), all receivers: percentiles, max, count (µs)


def rate_files(peers: Peers) -> list[tuple[str, str, str]]:
    """(role, peer, path) of every sender's and receiver's rate file."""
    return [
        (info.role, info.name, str(directory / name))
        for directory, info in peers
        if info.role in ("sender", "receiver")
        for name in info.files
        if name.endswith(".csv.gz")
    ]


def _shift_text(correction: Correction | None) -> str:
    if correction is None:
        return ""
    return ";".join(",".join(f"{v:.1f}" for v in values) for values in (correction.knots_us, correction.shifts_us))


def _file_cells(role: str, peer: str, path: str, shift: str) -> Any:
    """One rate file's cells, as an Arrow record batch (runs on an executor). The rows hold
    each message's intended time and arrival, each by its own clock: the clock correction at
    the arrival goes in before anything is clamped."""
    import pyarrow as pa  # noqa: PLC0415 - Spark's Python workers import it anyway

    eta, ata = rate_columns(Path(path).read_bytes(), path)
    seconds = ata // 1_000_000
    first = int(seconds.min()) if len(seconds) else 0
    offsets = seconds - first
    per_second = np.bincount(offsets)
    present = np.flatnonzero(per_second)
    columns = [(present + first, np.full(len(present), _ARRIVALS, np.int64), per_second[present])]
    peers = [peer] * len(present)
    if role == "receiver" and len(ata):
        latency = ata - eta
        if shift:
            knots, shifts = (np.array(part.split(","), dtype=np.float64) for part in shift.split(";"))
            latency += np.rint(np.interp(ata, knots, shifts)).astype(np.int64)
        latency = np.clip(latency, LOWEST_US, HIGHEST_US)
        keys, counts = np.unique(offsets * _COUNTS_LEN + bucket_indexes(latency), return_counts=True)
        columns.append((keys // _COUNTS_LEN + first, keys % _COUNTS_LEN, counts))
        # Latency cells carry no peer: every receiver's count of a second and bucket adds up in
        # the one aggregation, into the merged distribution the report draws.
        peers += [""] * len(keys)
    second_column, bucket_column, count_column = (np.concatenate(parts) for parts in zip(*columns, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([role] * len(peers), pa.string()),
            pa.array(peers, pa.string()),
            pa.array(second_column, pa.int64()),
            pa.array(bucket_column, pa.int64()),
            pa.array(count_column, pa.int64()),
        ],
        names=["role", "peer", "second", "bucket", "count"],
    )


def _cells(batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        columns = batch.to_pydict()
        for role, peer, path, shift in zip(
            columns["role"], columns["peer"], columns["path"], columns["shift"], strict=True
        ):
            yield _file_cells(role, peer, path, shift)


def file_listing(spark: Any, files: list[Any], schema: str) -> Any:
    """The files to read as a DataFrame of one task per core, each a share of them. Fewer, larger
    tasks measured faster: 30 files of 1 M rows took local[2] 0.78 s in two tasks, 0.98 s in
    four and 1.45 s in sixteen (bench/report_throughput.py's files)."""
    context = spark.sparkContext
    return spark.createDataFrame(
        context.parallelize(files, numSlices=min(len(files), context.defaultParallelism)), schema
    )


def report_series(spark: Any, peers: Peers, corrections: dict[str, Correction] | None = None) -> Series:
    """The rates per peer and second, and the corrected latency per second, from Spark."""
    import pyarrow.compute as pc  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415, N812 - pyspark's own convention

    corrections = corrections or {}
    files = [(role, peer, path, _shift_text(corrections.get(peer))) for role, peer, path in rate_files(peers)]
    if not files:
        return Series({}, 0, {})
    # A file's cells are a few thousand rows, so the sums that follow are small.
    listing = file_listing(spark, files, _FILES)
    cells = (
        listing.mapInArrow(_cells, _CELLS)
        .groupBy("role", "peer", "second", "bucket")
        .agg(F.sum("count").alias("count"))
        .toArrow()
    )
    arrivals = pc.equal(cells.column("bucket"), _ARRIVALS)
    rates: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    rows = 0
    for role, peer, second, count in zip(
        *(cells.filter(arrivals).column(name).to_pylist() for name in ("role", "peer", "second", "count")),
        strict=True,
    ):
        rates[(role, peer)][second] = count
        rows += count
    return Series(dict(rates), rows, _percentiles(cells.filter(pc.invert(arrivals))))


def _percentiles(buckets: Any) -> LatencySeries:
    """Per second: the percentiles of the HDR histogram that the buckets' counts make (one cell
    per second and bucket, all receivers added up by Spark)."""
    seconds = buckets.column("second").to_numpy()
    indexes = buckets.column("bucket").to_numpy()
    counts = buckets.column("count").to_numpy()
    if not len(seconds):
        return {}
    order = np.argsort(seconds, kind="stable")
    seconds, indexes, counts = seconds[order], indexes[order], counts[order]
    starts = np.flatnonzero(np.r_[True, seconds[1:] != seconds[:-1]])
    out: LatencySeries = {}
    for start, end in zip(starts, [*starts[1:], len(seconds)], strict=True):
        out[int(seconds[start])] = figures_of(histogram_of(indexes[start:end], counts[start:end]))
    return out


def figures_of(h: Any) -> dict[str, float]:
    return {
        **{f"p{p:g}": float(h.get_value_at_percentile(p)) for p in PERCENTILES},
        "max": float(h.get_max_value()),
        "count": float(h.get_total_count()),
    }


def latency_series(peers: Peers, corrections: dict[str, Correction], kind: str = "corrected") -> LatencySeries:
    """Per second (of each interval's start), all receivers merged: the percentiles of `kind`
    (`corrected` or `service`) latency (µs) in the HDR interval logs, with the clock corrections
    across hosts that the summary applies. The report draws the service latency from here."""
    name = {"corrected": "receiver-latency.hlog", "service": "receiver-service-latency.hlog"}[kind]
    merged: dict[int, Any] = {}
    for directory, info in peers:
        if info.receiver is None or not (directory / name).exists():
            continue
        correction = corrections.get(info.name)
        for interval in read_intervals(directory / name):
            second = interval.get_start_time_stamp() // 1000
            moved, _ = shifted(interval, left_to_shift(correction, info.receiver, interval))
            merged.setdefault(second, new_histogram()).add(moved)
    return {second: figures_of(h) for second, h in sorted(merged.items()) if h.get_total_count()}


def inspector_tables(test_dir: Path) -> dict[str, list[dict[str, str]]]:
    """Each inspector CSV by `peer/file`, as rows."""
    tables = {}
    for path in sorted(test_dir.glob("inspector/*/*.csv")):
        with path.open(newline="") as f:
            tables[f"{path.parent.name}/{path.stem}"] = list(csv.DictReader(f))
    return tables

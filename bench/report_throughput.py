"""Reporter throughput: rate records per second through read -> per-second aggregate, with
PySpark (the reporter's own `report_series`, on local[1] and local[2]) beside a single-process
pandas baseline written as a pandas user would (read_csv's C engine, cumsum, bincount) over the
same files in the same run, and DuckDB where it is installed. Prints figures; never passes or
fails.

    .venv/bin/python bench/report_throughput.py --records 30000000 --files 30
    .venv/bin/python bench/report_throughput.py --smoke

The Spark session's start is timed on its own: it is paid once per `maestro report` run. So is
the first job's warm-up (the JVM compiles the aggregation, the Python workers load pyarrow), so
the series is timed twice: cold (the first test of a run) and warm (each test after it). Each
master runs in a process of its own, with a JVM of its own, as `maestro report` does; the
session line says whether that JVM mapped the class-data archive (reports/jvm_archive.py), which
the first Spark run on a machine leaves as its JVM exits.
The fault table of a ten-second fault in the middle is timed after them: two more passes over
the files, read once as a sender's and once as a receiver's. Last, the data server's report
builder makes the whole report twice: once starting its JVM, once with its session kept.
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from _procfs import descendants, status_kb

from protocol.ratefile import RateFileWriter
from protocol.results import PeerRecord, ReceiverAccount, SenderAccount, write_peer_json
from reports.faults import PeerEvents, Window, fault_effects, spark_gather
from reports.report_queue import ReportQueue
from reports.summary import read_peers, summarize
from reports.time_series import report_series, spark_session

T0_US = 1_800_000_000_000_000


def generate(test_dir: Path, records: int, files: int) -> None:
    """`files` rate files of one sender, 10k msg/s of intended times, 80 µs to the send."""
    peer_dir = test_dir / "sender" / "s1"
    per_file = records // files
    writer = RateFileWriter(peer_dir, "sender", {"role": "sender", "peer": "s1"}, rows_per_file=per_file)
    for i in range(per_file * files):
        eta = T0_US + i * 100
        writer.write(eta, eta + 80 + i % 13)
    writer.close()
    account = SenderAccount(sent=per_file * files, warm_up_end_ns=0, warm_up_s=0.0)
    write_peer_json(peer_dir, PeerRecord("s1", "sender", files=tuple(writer.names()), sender=account))


def _fault_table(spark: object, test_dir: Path, records: int) -> None:
    ((directory, info),) = read_peers(test_dir)
    peers = [(directory, info), (directory, replace(info, role="receiver", receiver=ReceiverAccount(received=0)))]
    middle = T0_US + records * 100 // 2  # µs: one record every 100 µs
    window = Window("a1", "stop", "broker", middle, middle + 10_000_000)
    started = time.perf_counter()
    (row,) = fault_effects([window], spark_gather(spark, peers), PeerEvents())
    took = time.perf_counter() - started
    # 10,000 msg/s before the fault (over a little less than its ten seconds in --smoke's 20 s).
    rate = row["rate_before_per_s"]
    assert row["lost"] == 0 and isinstance(rate, float) and round(rate) == 10_000, row
    print(f"  fault table (2 passes, both roles): {4 * records / took / 1e6:.2f} M records/s ({took:.1f} s)")


def pandas_baseline(test_dir: Path) -> int:
    """Per-second counts of every file, vectorised: the baseline a pandas user would write."""
    total = 0
    for path in sorted((test_dir / "sender" / "s1").glob("*.csv.gz")):
        with gzip.open(path, "rt") as f:
            base_us = int(f.readline().split("base_us=")[1].split()[0])
        frame = pd.read_csv(path, compression="gzip", skiprows=1, engine="c", dtype="int64")
        seconds = ((base_us + frame["ata"].cumsum()) // 1_000_000).to_numpy()
        total += int(np.bincount(seconds - seconds.min()).sum())
    return total


def duckdb_baseline(test_dir: Path) -> int | None:
    try:
        import duckdb  # noqa: PLC0415 - optional: measured where it is installed
    except ImportError:
        return None
    total = 0
    for path in sorted((test_dir / "sender" / "s1").glob("*.csv.gz")):
        with gzip.open(path, "rt") as f:
            base_us = int(f.readline().split("base_us=")[1].split()[0])
        query = (
            f"SELECT count(*) FROM (SELECT ({base_us} + sum(ata) OVER (ROWS UNBOUNDED PRECEDING)) // 1000000 AS s "
            f"FROM read_csv('{path}', skip=1, header=true)) GROUP BY s"
        )
        counts = duckdb.sql(query)
        assert counts is not None  # a SELECT always has a relation
        total += sum(n for (n,) in counts.fetchall())
    return total


def _print_peaks(label: str) -> None:
    """Peak RSS of this process (the driver) and of its children (the JVM, Python workers)."""
    peaks: dict[str, float] = {}
    for pid in descendants(os.getpid()):
        name, kb, _ = status_kb(pid, "VmHWM")
        peaks[name] = max(peaks.get(name, 0.0), kb / 1024)
    # A child that ended while being read (Spark's launcher script) reads 0 MB: not a peak.
    children = ", ".join(f"{name} {mb:,.0f} MB" for name, mb in sorted(peaks.items()) if mb >= 1)
    driver_mb = status_kb(os.getpid(), "VmHWM")[1] / 1024
    print(f"  peak RSS ({label}): driver {driver_mb:,.0f} MB; {children or 'no children'}")


def _summaries(test_dir: Path, rows: int) -> None:
    """The data server's figures from the writers' pieces, and the same read row by row (as for
    a folder whose writers left no piece): the two must agree."""
    started = time.perf_counter()
    figures = summarize(test_dir)
    print(f"summary (data server's figures, merged pieces): {time.perf_counter() - started:.3f} s")
    rows_only = [
        (directory, replace(info, files=tuple(n for n in info.files if n.endswith(".csv.gz"))))
        for directory, info in read_peers(test_dir)
    ]
    started = time.perf_counter()
    by_rows = summarize(test_dir, peers=rows_only)
    rescan_s = time.perf_counter() - started
    print(f"summary (rows read, 1 core): {rows / rescan_s / 1e6:.2f} M records/s ({rescan_s:.1f} s)")
    assert figures == by_rows and figures.send_rate.mean > 0


def spark_floor_s(spark: object, partitions: int) -> float:
    """What any job of the reporter's shape costs Spark however little it reads: a mapInArrow
    over `partitions` tasks, grouped, collected (median of five, after two to warm up)."""

    def passed_on(batches: Iterator[object]) -> Iterator[object]:  # nested: pickled by value
        yield from batches

    frame = spark.range(0, 30, 1, partitions)  # type: ignore[attr-defined]
    times = []
    for _ in range(7):
        started = time.perf_counter()
        frame.mapInArrow(passed_on, "id long").groupBy("id").count().toArrow()
        times.append(time.perf_counter() - started)
    return sorted(times[2:])[2]


def spark_part(master: str, test_dir: Path, records: int, files: int) -> tuple[float, int, float]:
    """The reporter on `master`, in a process of its own: a JVM of its own, so `cold` is what a
    `maestro report` run pays (a second session in one Python process reuses the first one's
    JVM, its classes loaded and its code compiled). The warm run's seconds, its rows, and
    Spark's floor per job."""
    started = time.perf_counter()
    spark = spark_session(master)
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
    jvm = "maps its class-data archive" if "SharedArchiveFile" in options else "no class-data archive yet"
    print(f"spark session start ({master}): {time.perf_counter() - started:.1f} s (the JVM {jvm})")
    try:
        for when in ("cold", "warm"):
            started = time.perf_counter()
            rows = report_series(spark, read_peers(test_dir)).rows
            took = time.perf_counter() - started
            assert rows == records // files * files
            print(f"spark {master}, {when}: {rows / took / 1e6:.2f} M records/s ({took:.1f} s)", flush=True)
        _fault_table(spark, test_dir, rows)
        floor_s = spark_floor_s(spark, min(files, spark.sparkContext.defaultParallelism))
        print(f"  spark's floor per job ({master}: a mapInArrow reading nothing, grouped): {floor_s:.2f} s")
        _print_peaks(master)
    finally:
        spark.stop()
    return took, rows, floor_s


def builder_part(test_dir: Path, rows: int) -> None:
    """The data server's way: a whole report (read, aggregate, summary, charts, page) asked of its
    report builder twice. The first pays for the JVM as `maestro report` does; the second is
    built by the same builder, its Spark session up (reports/report_queue.py)."""
    queue = ReportQueue(test_dir.parent)
    try:
        for when in ("first, the JVM started", "again, the builder warm"):
            (test_dir / "report" / "index.html").unlink(missing_ok=True)
            started = time.perf_counter()
            while (state := queue.ask(test_dir.name)).state not in ("done", "failed"):
                time.sleep(0.02)
            took = time.perf_counter() - started
            assert state.state == "done", state.error
            print(f"report server, a whole report {when}: {rows / took / 1e6:.2f} M records/s ({took:.1f} s)")
    finally:
        queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000_000)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="200,000 records: check that it still runs")
    parser.add_argument("--soak", action="store_true", help="360 M records in 360 files, with peak RSS")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.files = 200_000, 4
    if args.soak:
        args.records, args.files = 360_000_000, 360
    with tempfile.TemporaryDirectory() as tmp:
        test_dir = Path(tmp) / "bench"
        started = time.perf_counter()
        generate(test_dir, args.records, args.files)
        print(f"generated {args.records:,} records in {args.files} files: {time.perf_counter() - started:.1f} s")

        spark_s, floor_s = {}, {}
        # Smoke: one session (each start is 10-15 s of a CI run); the ratios need both.
        masters = ("local[2]",) if args.smoke else ("local[1]", "local[2]")
        spawn = multiprocessing.get_context("spawn")
        for master in masters:
            with ProcessPoolExecutor(1, mp_context=spawn) as fresh:
                job = fresh.submit(spark_part, master, test_dir, args.records, args.files)
                spark_s[master], rows, floor_s[master] = job.result()
        started = time.perf_counter()
        baseline_rows = pandas_baseline(test_dir)
        pandas_s = time.perf_counter() - started
        assert baseline_rows == rows
        print(f"pandas (vectorised, 1 core): {rows / pandas_s / 1e6:.2f} M records/s ({pandas_s:.1f} s)")
        started = time.perf_counter()
        duck_rows = duckdb_baseline(test_dir)
        if duck_rows is None:
            print("duckdb: not installed")
        else:
            duck_s = time.perf_counter() - started
            assert duck_rows == rows
            print(f"duckdb: {rows / duck_s / 1e6:.2f} M records/s ({duck_s:.1f} s)")
        _summaries(test_dir, rows)
        builder_part(test_dir, rows)
        _print_peaks("this process: the baselines and the summary")
        if "local[1]" in spark_s:
            print(f"local[1] -> local[2], warm: {spark_s['local[1]'] / spark_s['local[2]']:.2f}x")
            beyond = [spark_s[m] - floor_s[m] for m in ("local[1]", "local[2]")]
            print(f"local[1] -> local[2], warm, the time beyond Spark's floor: {beyond[0] / beyond[1]:.2f}x")
        print(f"spark local[2], warm / pandas: {pandas_s / spark_s['local[2]']:.2f}x")


if __name__ == "__main__":
    main()

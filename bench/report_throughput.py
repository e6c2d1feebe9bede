"""Reporter throughput: rate records per second through read -> per-second aggregate, with
PySpark (the reporter's own `rate_series`) beside a single-process pandas baseline over the same
files in the same run. Prints figures; never passes or fails.

    .venv/bin/python bench/report_throughput.py --records 30000000 --files 30
    .venv/bin/python bench/report_throughput.py --smoke

The Spark session's start is timed on its own: it is paid once per `maestro report` run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd

from protocol.ratefile import RateFileWriter, read_rate_file
from reports.series import rate_series, spark_session
from reports.summary import read_peers

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
    info = {"name": "s1", "role": "sender", "files": [p.name for p in writer.paths]}
    (peer_dir / "peer.json").write_text(json.dumps(info))


def pandas_baseline(test_dir: Path) -> int:
    total = 0
    for path in sorted((test_dir / "sender" / "s1").glob("*.csv.gz")):
        frame = pd.DataFrame(list(read_rate_file(path)), columns=["eta", "ata"])
        counts = (frame["ata"] // 1_000_000).value_counts()
        total += int(counts.sum())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000_000)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="200,000 records: check that it still runs")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.files = 200_000, 4
    with tempfile.TemporaryDirectory() as tmp:
        test_dir = Path(tmp) / "bench"
        started = time.perf_counter()
        generate(test_dir, args.records, args.files)
        print(f"generated {args.records:,} records in {args.files} files: {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        spark = spark_session()
        print(f"spark session start: {time.perf_counter() - started:.1f} s")
        try:
            started = time.perf_counter()
            _, rows = rate_series(spark, read_peers(test_dir))
            spark_s = time.perf_counter() - started
        finally:
            spark.stop()
        started = time.perf_counter()
        baseline_rows = pandas_baseline(test_dir)
        pandas_s = time.perf_counter() - started
        assert rows == baseline_rows == args.records // args.files * args.files
        print(f"spark:  {rows / spark_s / 1e6:.2f} M records/s ({spark_s:.1f} s)")
        print(f"pandas: {baseline_rows / pandas_s / 1e6:.2f} M records/s ({pandas_s:.1f} s)")
        print(f"spark / pandas: {pandas_s / spark_s:.2f}x")


if __name__ == "__main__":
    main()

"""`python -m reports serve|report`: the data server, and the reporter, each as a process of its
own (the `maestro` CLI starts them so: the coordinator package does not import this one)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from protocol.daemon_cli import configure_logging
from protocol.secrets import TOKEN_FILE_ENV, SecretFileError, env_path, read_token_file
from reports.paths import UnsafePathError, resolve_inside
from reports.server import create_app

__all__ = ["main"]

log = logging.getLogger(__name__)


def _report(args: argparse.Namespace) -> int:
    from reports.baseline import Thresholds  # noqa: PLC0415 - Spark and Plotly only here
    from reports.report import build_index, build_report  # noqa: PLC0415
    from reports.series import spark_session  # noqa: PLC0415

    root: Path = args.results
    if not root.is_dir():
        print(f"maestro report: no results folder {root}", file=sys.stderr)
        return 2
    try:
        tests = [resolve_inside(root, t) for t in args.test_ids]
    except UnsafePathError as exc:
        print(f"maestro report: {exc}", file=sys.stderr)
        return 2
    missing = [t.name for t in tests if not t.is_dir()]
    if missing:
        print(f"maestro report: no test {', '.join(missing)} in {root}", file=sys.stderr)
        return 2
    if not tests:
        candidates = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        tests = [d for d in candidates if args.all or not (d / "report" / "index.html").exists()]
    baseline = None
    if args.baseline:
        try:
            baseline = resolve_inside(root, args.baseline)
        except UnsafePathError as exc:
            print(f"maestro report: baseline: {exc}", file=sys.stderr)
            return 2
        if not baseline.is_dir():
            print(f"maestro report: no baseline test {args.baseline} in {root}", file=sys.stderr)
            return 2
    thresholds = Thresholds(args.max_throughput_drop, args.max_latency_rise, args.max_loss_rise)
    regressions = []
    if tests:
        started = time.monotonic()
        jvm_log = None if args.verbose else root / ".logs" / "spark.log"
        spark = spark_session(args.master, jvm_log)
        print(
            f"report: spark session up in {time.monotonic() - started:.1f} s"
            + (f" (its log: {jvm_log})" if jvm_log else ""),
            file=sys.stderr,
        )
        try:
            for test_dir in tests:
                folder, summary = build_report(spark, test_dir, baseline, thresholds)
                print(f"report: {folder / 'index.html'}")
                comparison = summary.get("baseline")
                if comparison:
                    print(f"against {comparison['test_id']}: {comparison['verdict']} {comparison['regressions'] or ''}")
                    if comparison["verdict"] != "pass":
                        regressions.append(test_dir.name)
        finally:
            spark.stop()
    print(f"index:  {build_index(root)}")
    return 3 if regressions else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="maestro", description="The data server and report browser; the reporter.", fromfile_prefix_chars="@"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the data server")
    serve.add_argument("--data", type=Path, default=Path("results"), help="the data root (default: %(default)s)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="(default: %(default)s)")
    serve.add_argument(
        "--token-file",
        type=Path,
        default=env_path(TOKEN_FILE_ENV),
        help="refuse uploads without the bearer token in this file (mode 600); reading stays open "
        "(default: $MAESTRO_TOKEN_FILE, else none)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    report = sub.add_parser(
        "report",
        help="write the report of tests in a results folder",
        description="Read a results folder with Spark and write <test>/report/index.html and summary.json for "
        "each test (by default every test without a report), and the results index. Test ids go before options.",
    )
    report.add_argument("results", type=Path, help="the results folder (the data server's root)")
    report.add_argument("test_ids", nargs="*", help="tests to report (default: every test without a report)")
    report.add_argument("--all", action="store_true", help="report every test again")
    report.add_argument("--master", help="Spark master URL (default: local[*])")
    report.add_argument("--baseline", help="compare with this test; exit 3 on a regression")
    report.add_argument("--max-throughput-drop", type=float, default=0.05, help="fraction (default: %(default)s)")
    report.add_argument("--max-latency-rise", type=float, default=0.10, help="fraction (default: %(default)s)")
    report.add_argument("--max-loss-rise", type=float, default=0.0, help="loss ratio points (default: %(default)s)")
    report.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    report.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's and the JVM's own output (default: to RESULTS/.logs/spark.log)",
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    if args.command == "report":
        return _report(args)
    try:
        token = read_token_file(args.token_file).encode() if args.token_file else None
    except SecretFileError as exc:
        print(f"maestro serve: {exc}", file=sys.stderr)
        return 2
    try:
        app = create_app(args.data, token)
    except OSError as exc:
        print(f"maestro serve: cannot use {args.data}: {exc}", file=sys.stderr)
        return 2
    log.info(
        "data server on http://%s:%d, data root %s%s",
        args.host,
        args.port,
        args.data.resolve(),
        "; uploads only with its bearer token" if token else "",
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0

"""`python -m reports serve|report`: the data server, and the reporter, each as a process of its
own (the `maestro` CLI starts them so: the coordinator package does not import this one)."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn

from protocol.daemon_cli import add_log_level, configure_logging
from protocol.secrets import TOKEN_FILE_ENV, SecretFileError, env_path, read_token_file
from reports.change_points import DEFAULT_MAX_P
from reports.paths import UnsafePathError, resolve_inside
from reports.server import create_app

__all__ = ["main"]

log = logging.getLogger(__name__)


def _report(args: argparse.Namespace) -> int:
    from reports.baseline import Thresholds  # noqa: PLC0415 - Spark and Plotly only here
    from reports.report import build_index, build_report  # noqa: PLC0415
    from reports.report_builder import told_session  # noqa: PLC0415

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
        jvm_log = None if args.verbose else root / ".logs" / "spark.log"
        spark = told_session(args.master, jvm_log, sys.stderr)
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


def _history(args: argparse.Namespace) -> int:
    from reports.baseline import Thresholds  # noqa: PLC0415 - Plotly only here
    from reports.history import analyse, gate, history_page, history_table  # noqa: PLC0415
    from reports.page import PLOTLY_JS  # noqa: PLC0415

    try:
        runs = _history_runs(args)
    except HistorySourceError as exc:
        print(f"maestro history: {exc}", file=sys.stderr)
        return 2
    if not runs:
        where = args.server or args.results
        print(f"maestro history: no finished run of a test named {args.name!r} in {where}", file=sys.stderr)
        return 2
    history = analyse(args.name, runs, max_p=args.max_p)
    regressions = gate(history, Thresholds(args.max_throughput_drop, args.max_latency_rise, args.max_loss_rise))
    if args.json:
        print(json.dumps(history.as_dict() | {"regressions": regressions}, indent=2))
    else:
        print(history_table(history))
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PLOTLY_JS, args.html.parent / "plotly.min.js")
        args.html.write_text(history_page(history, "plotly.min.js"))
        print(f"page: {args.html}", file=sys.stderr)
    if args.gate:
        for why in regressions:
            print(f"regression: {why}", file=sys.stderr)
        print(f"gate: {'regression' if regressions else 'pass'}", file=sys.stderr)
        return 3 if regressions else 0
    return 0


class HistorySourceError(Exception):
    pass


def _history_runs(args: argparse.Namespace) -> list[Any]:
    from reports.history import read_runs, runs_from_dicts  # noqa: PLC0415

    if args.server:
        url = f"{args.server.rstrip('/')}/api/history/{urllib.parse.quote(args.name, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise HistorySourceError(f"{url} answered {exc.code}: {exc.read().decode(errors='replace')[:300]}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HistorySourceError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from exc
        return runs_from_dicts(answer.get("runs", []))
    if not args.results.is_dir():
        raise HistorySourceError(f"no results folder {args.results}")
    return read_runs(args.results, args.name)


def _add_history(sub: Any) -> None:
    history = sub.add_parser(
        "history",
        help="every run of a test by name, with change points in its figures; --gate fails on a regression",
        description="List every finished run of the test named NAME (oldest first) with its receive rate, latency "
        "p50/p99/p99.9 and loss, and find change points in each figure by E-divisive means with a permutation "
        "test. Failed and generator-bound runs are marked and left out of the detection. With --gate, exit 3 when "
        "the newest runs sit after a change point that made a figure worse beyond its threshold.",
    )
    history.add_argument("name", help="the test's name (test.json's name; `maestro test --name`)")
    source = history.add_mutually_exclusive_group()
    source.add_argument("--results", type=Path, default=Path("results"), help="a results folder (default: %(default)s)")
    source.add_argument("--server", help="a data server's URL instead, e.g. http://lab-data:8080")
    history.add_argument("--gate", action="store_true", help="exit 3 when the newest runs regressed")
    history.add_argument("--max-throughput-drop", type=float, default=0.05, help="fraction (default: %(default)s)")
    history.add_argument("--max-latency-rise", type=float, default=0.10, help="fraction (default: %(default)s)")
    history.add_argument("--max-loss-rise", type=float, default=0.0, help="loss ratio points (default: %(default)s)")
    history.add_argument(
        "--max-p", type=float, default=DEFAULT_MAX_P, help="significance level of a change point (default: %(default)s)"
    )
    history.add_argument("--json", action="store_true", help="print the history as JSON instead of a table")
    history.add_argument("--html", type=Path, help="also write the history page to this file")
    add_log_level(history, "warning")


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
    add_log_level(serve, "info")
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
    add_log_level(report, "warning")
    report.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's and the JVM's own output (default: to RESULTS/.logs/spark.log)",
    )
    _add_history(sub)
    builder = sub.add_parser(
        "builder",
        help="the data server's report builder (it starts this itself)",
        description="Build the report of each test id read on stdin, one Spark session for them all "
        "(reports/report_builder.py).",
    )
    builder.add_argument("results", type=Path, help="the results folder (the data server's root)")
    add_log_level(builder, "warning")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    if args.command == "report":
        return _report(args)
    if args.command == "builder":
        from reports.report_builder import run_builder  # noqa: PLC0415 - Spark only here

        return run_builder(args.results.resolve(), sys.stdin)
    if args.command == "history":
        return _history(args)
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

"""`python -m reports serve|report`: the data server, and the reporter, each as a process of its
own (the `maestro` CLI starts them so: the coordinator package does not import this one)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import uvicorn

from protocol.codes import ExitCode
from protocol.daemon_cli import add_log_level, configure_logging
from protocol.secrets import TOKEN_FILE_ENV, SecretFileError, env_path, read_secret_file, read_token_file
from reports.change_points import DEFAULT_LAST_RUNS, DEFAULT_MAX_P
from reports.data_server_client import DataServerError, get_json
from reports.paths import UnsafePathError, resolve_inside, result_dirs
from reports.results_index import ResultsIndexError
from reports.server import create_app

if TYPE_CHECKING:
    from reports.verdict import GateRules, GateVerdict

WEBHOOK_ENV = "MAESTRO_WEBHOOK_URL"

__all__ = ["main"]

log = logging.getLogger(__name__)


def _report(args: argparse.Namespace) -> int:
    from reports.baseline import Thresholds  # noqa: PLC0415 - Spark and Plotly only here
    from reports.report import build_index  # noqa: PLC0415

    root: Path = args.results
    if not root.is_dir():
        print(f"maestro report: no results folder {root}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    try:
        tests = [resolve_inside(root, t) for t in args.test_ids]
        baseline = resolve_inside(root, args.baseline) if args.baseline else None
    except UnsafePathError as exc:
        print(f"maestro report: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    missing = [t.name for t in tests if not t.is_dir()] + (
        [baseline.name] if baseline and not baseline.is_dir() else []
    )
    if missing:
        print(f"maestro report: no test {', '.join(missing)} in {root}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    if not tests:
        candidates = sorted(result_dirs(root))
        tests = [d for d in candidates if args.all or not (d / "report" / "index.html").exists()]
    thresholds = Thresholds(args.max_throughput_drop, args.max_latency_rise, args.max_loss_rise)
    built = _build_reports(args, tests, baseline, thresholds) if tests else _Built()
    print(f"index:  {build_index(root)}")
    if built.failed:
        print(f"maestro report: {len(built.failed)} of {len(tests)} reports not built:", file=sys.stderr)
        for why in built.failed:
            print(f"  {why}", file=sys.stderr)
        return ExitCode.FAILED
    if built.regressions:
        return ExitCode.REGRESSION
    return ExitCode.INVALID if built.not_compared else ExitCode.SUCCESS


@dataclass
class _Built:
    """What became of the reports asked for, by test id."""

    failed: list[str] = field(default_factory=list)  # "<test id>: why", one line each
    regressions: list[str] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # an invalid run on either side: no verdict


def _build_reports(args: argparse.Namespace, tests: list[Path], baseline: Path | None, thresholds: Any) -> _Built:
    """Each test's report in one Spark session; a test whose files fail its report is said in
    one line and the others' are still built."""
    from reports.report import build_report  # noqa: PLC0415 - Spark and Plotly only here
    from reports.report_builder import told_session  # noqa: PLC0415

    root: Path = args.results
    built = _Built()
    spark = told_session(args.master, None if args.verbose else root / ".logs" / "spark.log", sys.stderr)
    try:
        for test_dir in tests:
            try:
                folder, comparison = build_report(spark, test_dir, baseline, thresholds)
            except Exception as exc:  # this test's files: the other tests' reports are still built
                built.failed.append(
                    f"{test_dir.name}: {_one_line(exc, root / '.logs' / f'report-{test_dir.name}.log')}"
                )
                print(f"report of {built.failed[-1]}", file=sys.stderr)
                continue
            print(f"report: {folder / 'index.html'}")
            if comparison is not None:
                said = comparison.reason or comparison.regressions or ""
                print(f"against {comparison.test_id}: {comparison.verdict} {said}")
                if comparison.verdict == "regression":
                    built.regressions.append(test_dir.name)
                elif comparison.verdict == "invalid":
                    built.not_compared.append(test_dir.name)
    finally:
        spark.stop()
    return built


def _one_line(exc: Exception, kept: Path) -> str:
    """Why a report was not built, in one line: a reader's own words (a file cut short, not a
    rate file) where Spark's error carries them inside its own; the traceback kept in `kept`."""
    text = "".join(traceback.format_exception(exc))
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(text)
    if isinstance(exc, ValueError | OSError):
        return str(exc).strip().splitlines()[0]
    ours = [
        line.split(": ", 1)[1] for line in text.splitlines() if line.startswith(("ValueError: ", "DamagedFileError: "))
    ]
    first = ours[-1] if ours else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{first} (traceback: {kept})"


def _report_or_say_why(args: argparse.Namespace) -> int:
    """`_report`, and when it breaks (Spark cannot start, a package is missing) one line saying
    why, with the traceback kept in RESULTS/.logs/report-error.log for whoever digs further."""
    try:
        return _report(args)
    except Exception as exc:
        kept = args.results / ".logs" / "report-error.log"
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(traceback.format_exc())
            where = f" (traceback: {kept})"
        except OSError:
            where = ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"maestro report: failed: {type(exc).__name__}: {first}{where}", file=sys.stderr)
        return 1


def _history(args: argparse.Namespace) -> int:
    from reports.history import analyse, history_page, history_table  # noqa: PLC0415 - Plotly only here
    from reports.page import PLOTLY_JS  # noqa: PLC0415
    from reports.verdict import GateVerdict, Verdict, judge, noise_table  # noqa: PLC0415

    try:
        args.webhook_url = _webhook_url(args.webhook_file)
        runs, unreadable = _history_runs(args)
    except (HistorySourceError, SecretFileError) as exc:
        return _cannot(args, "history", str(exc))
    history = analyse(args.name, runs, max_p=args.max_p, last=args.last)
    rules = _gate_rules(args)
    verdict = judge(history, rules) if runs else GateVerdict(Verdict.INCONCLUSIVE, "no finished run")
    if verdict.verdict is Verdict.PASS and (late := _written_after(unreadable, history.newest)):
        verdict = GateVerdict(Verdict.INCONCLUSIVE, late)
    if not runs:
        where = args.server or args.results
        missing = f"no finished run of a test named {args.name!r} in {where}"
        if not args.gate:
            return _cannot(args, "history", missing)
        print(f"maestro history: {missing}", file=sys.stderr)
        if args.json:
            print(json.dumps({"runs": [], "gate": verdict.as_dict()}, indent=2))
    elif any(path == "-" for _, path in args.export):
        pass  # standard output is the export's
    elif args.json:
        print(json.dumps(history.as_dict() | {"gate": verdict.as_dict()}, indent=2))
    elif args.noise:
        print(noise_table(history, rules))
    else:
        print(history_table(history))
    if args.html and runs:
        args.html.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PLOTLY_JS, args.html.parent / "plotly.min.js")
        args.html.write_text(history_page(history, "plotly.min.js"))
        print(f"page: {args.html}", file=sys.stderr)
    exported = _export(history, args.export) if runs else ExitCode.SUCCESS
    _notify(args, history, verdict)
    if args.gate:
        return _said(verdict, "gate")
    return exported


def _aba(args: argparse.Namespace) -> int:
    from reports.aba import fetch_legs, judge_aba, read_legs  # noqa: PLC0415

    try:
        legs = fetch_legs(args.server, args.test_id) if args.server else read_legs(args.results, args.test_id)
    except (ValueError, OSError) as exc:
        return _cannot(args, "aba", str(exc))
    verdict = judge_aba(legs, _gate_rules(args), args.max_drift)
    if args.json:
        print(json.dumps(verdict.as_dict(), indent=2))
    return _said(verdict, "aba")


def _written_after(unreadable: list[tuple[str, int]], newest: Any) -> str | None:
    """Why a PASS of `newest` cannot stand: a test.json that could not be read was written
    after it started, and may be tonight's run (a nightly job racing its writer, or a damaged
    file, passed the night before)."""
    try:
        started_ns = datetime.fromisoformat(newest.started).timestamp() * 1e9 if newest else 0.0
    except ValueError:
        started_ns = 0.0
    late = sorted(name for name, mtime_ns in unreadable if mtime_ns > started_ns)
    if not late:
        return None
    return (
        f"{late[0]}/test.json could not be read (being written, or damaged) and is newer than the newest run "
        f"{newest.test_id if newest else ''}: it may be tonight's"
    )


def _cannot(args: argparse.Namespace, command: str, why: str) -> int:
    """Exit 2 (CANNOT_RUN) saying why in one line; under --json, a script reading standard
    output gets it there as well: {"error": why}."""
    print(f"maestro {command}: {why}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": why}))
    return ExitCode.CANNOT_RUN


def _gate_rules(args: argparse.Namespace) -> GateRules:
    """The thresholds `_add_thresholds` took (and `--min-runs`, where the command has it)."""
    from reports.verdict import GateRules  # noqa: PLC0415

    given = {"min_runs": args.min_runs} if hasattr(args, "min_runs") else {}
    return GateRules(
        args.max_throughput_drop,
        args.max_latency_rise,
        args.max_loss_rise,
        args.max_duplicate_rise,
        recovery_rise=args.max_recovery_rise,
        **given,
    )


def _said(verdict: GateVerdict, command: str) -> int:
    """Each finding on standard error, labelled, then the verdict's line; its exit code."""
    from reports.verdict import Verdict  # noqa: PLC0415

    for finding in verdict.findings:
        label = Verdict.INCONCLUSIVE if finding in verdict.doubts else verdict.verdict
        print(f"{label.value.lower()}: {finding}", file=sys.stderr)
    print(f"{command}: {verdict.line}", file=sys.stderr)
    return int(verdict.exit_code)


def _export(history: Any, exports: list[tuple[str, str]]) -> ExitCode:
    """Each `--export FORMAT:PATH` written ("-": standard output); INVALID where one is refused
    because the newest run did not measure the SUT (nothing is written for it)."""
    from reports.exports import EXPORTS, NotExportableError  # noqa: PLC0415

    code = ExitCode.SUCCESS
    for kind, path in exports:
        try:
            text = EXPORTS[kind](history)
        except NotExportableError as exc:
            print(f"maestro history: --export {kind}: not written: {exc}", file=sys.stderr)
            code = ExitCode.INVALID
            continue
        if path == "-":
            sys.stdout.write(text)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
            print(f"{kind}: {path}", file=sys.stderr)
    return code


def _notify(args: argparse.Namespace, history: Any, verdict: Any) -> None:
    """The webhook, on a regression or an invalid newest run; a webhook that does not take it
    is said, and changes no exit code (the gate's verdict is the night's answer)."""
    from reports.exports import post_webhook, webhook_body  # noqa: PLC0415

    url = args.webhook_url
    newest = history.newest
    if not url or newest is None:
        return
    if args.server:
        report = f"{args.server.rstrip('/')}/results/{urllib.parse.quote(newest.test_id)}/report/"
    else:
        report = str((args.results / newest.test_id / "report" / "index.html").resolve())
    body = webhook_body(history, verdict, slack=args.webhook_format == "slack", report_url=report)
    if body is None:
        return
    failed = post_webhook(url, body)
    print(f"maestro history: webhook {'sent' if failed is None else failed}", file=sys.stderr)


def _webhook_url(path: Path | None) -> str | None:
    """The webhook's URL, from its file or the environment: never the command line, as a
    chat's webhook URL is its password."""
    url = read_secret_file(path, "webhook URL").decode() if path is not None else os.environ.get(WEBHOOK_ENV)
    if url and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        where = path if path is not None else f"${WEBHOOK_ENV}"
        raise HistorySourceError(f"the webhook URL in {where} is no http:// or https:// URL")
    return url or None


def _export_spec(text: str) -> tuple[str, str]:
    from reports.exports import EXPORTS  # noqa: PLC0415

    kind, _, path = text.partition(":")
    if kind not in EXPORTS or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: use FORMAT:PATH, FORMAT one of {', '.join(EXPORTS)}")
    return kind, path


class HistorySourceError(Exception):
    pass


def _history_runs(args: argparse.Namespace) -> tuple[list[Any], list[tuple[str, int]]]:
    """The runs named `args.name`, and the results folder's test.json files that could not be
    read (folder, mtime in ns): one of them may be tonight's run."""
    from reports.history import runs_from_dicts  # noqa: PLC0415

    if args.server:
        url = f"{args.server.rstrip('/')}/api/history/{urllib.parse.quote(args.name, safe='')}"
        try:
            answer = get_json(url)
        except DataServerError as exc:
            raise HistorySourceError(str(exc)) from exc
        if not isinstance(answer, dict):
            return [], []  # no run of that name: the gate's to say what that means
        return runs_from_dicts(answer.get("runs", [])), []
    if not args.results.is_dir():
        raise HistorySourceError(f"no results folder {args.results}")
    return _indexed_runs(args.results, args.db, args.name)


def _indexed_runs(results: Path, db: str | None, name: str) -> tuple[list[Any], list[tuple[str, int]]]:
    """The runs named `name` from the results index, brought up to date with the files first,
    and the test.json files it could not read."""
    from reports.results_index import ResultsIndex, ResultsIndexError  # noqa: PLC0415 - SQLAlchemy only here

    try:
        with ResultsIndex(results, db) as index:
            stats = index.sync()
            return index.runs(name), list(stats.unreadable)
    except ResultsIndexError as exc:
        raise HistorySourceError(str(exc)) from exc


def _index(args: argparse.Namespace) -> int:
    from reports.results_index import ResultsIndex, ResultsIndexError  # noqa: PLC0415 - SQLAlchemy only here

    if not args.results.is_dir():
        print(f"maestro index: no results folder {args.results}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    try:
        with ResultsIndex(args.results, args.db) as index:
            stats = index.rebuild()
            names, where = index.names(), index.shown_url
    except ResultsIndexError as exc:
        print(f"maestro index: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    print(
        f"indexed {stats.rows} test records of {args.results} ({len(names)} test names with finished runs) in {where}"
    )
    return ExitCode.SUCCESS


def _threshold(text: str, drop: bool = False) -> Any:
    from reports.verdict import Threshold  # noqa: PLC0415

    try:
        return Threshold.parse(text, fraction_under_1=drop)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _drop(text: str) -> Any:
    return _threshold(text, drop=True)


class _OneLineErrors(argparse.ArgumentParser):
    """A usage error in one line, exit 2; under --json, {"error": ...} on standard output too
    (a nightly job reading it got nothing there). --help shows the usage."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        if "--json" in sys.argv[1:]:
            print(json.dumps({"error": message}))
        raise SystemExit(ExitCode.CANNOT_RUN)


def _at_least_2(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of runs, at least 2 (a noise needs 2)")
    return number


def _number(what: str, fits: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type: a number that `fits` (NaN never does), else `what` it must be."""

    def parse(text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not fits(number):
            raise argparse.ArgumentTypeError(f"{text!r}: {what}")
        return number

    return parse


_ratio_points = _number("ratio points from 0 to 1 (0.001 is 0.1 %)", lambda n: 0 <= n <= 1)
_probability = _number("a probability above 0, at most 1", lambda n: 0 < n <= 1)


def _add_db(parser: Any) -> None:
    parser.add_argument(
        "--db",
        help="the results index: a SQLAlchemy URL, e.g. postgresql://user@host/db (default: SQLite in "
        "RESULTS/.maestro-index.sqlite3)",
    )


def _add_thresholds(parser: argparse.ArgumentParser) -> None:
    thresholds = "a fraction (0.05), a percentage (5%%) or noise units (3sigma)"
    parser.add_argument(
        "--max-throughput-drop", type=_drop, default="0.05", help=f"{thresholds} (default: %(default)s)"
    )
    parser.add_argument(
        "--max-latency-rise", type=_threshold, default="0.10", help=f"{thresholds} (default: %(default)s)"
    )
    parser.add_argument(
        "--max-loss-rise", type=_ratio_points, default=0.0, help="loss ratio points (default: %(default)s)"
    )
    parser.add_argument(
        "--max-duplicate-rise", type=_ratio_points, default=0.0, help="duplicate ratio points (default: %(default)s)"
    )
    parser.add_argument(
        "--max-recovery-rise",
        type=_threshold,
        default="100%",
        help=f"the recovery after faults (the slowest fault's, whole seconds): {thresholds} (default: %(default)s)",
    )


def _add_history(sub: Any) -> None:
    history = sub.add_parser(
        "history",
        help="every run of a test by name, with change points in its figures; --gate: PASS, REGRESSION or INCONCLUSIVE",
        description="List every finished run of the test named NAME (oldest first) with its receive rate, latency "
        "p50/p99/p99.9, loss and duplicates, and find change points in each figure by E-divisive means with a "
        "permutation test. Failed and generator-bound runs, and runs of another workload or testbed than the "
        "newest, are marked and left out. With --gate, judge the newest run: exit 0 (PASS), 3 (REGRESSION) or 5 "
        "(INCONCLUSIVE: too few comparable runs, or noise wider than a threshold), with one line saying why.",
    )
    history.add_argument("name", help="the test's name (test.json's name; `maestro test --name`)")
    source = history.add_mutually_exclusive_group()
    source.add_argument("--results", type=Path, default=Path("results"), help="a results folder (default: %(default)s)")
    source.add_argument("--server", help="a data server's URL instead, e.g. http://lab-data:8080")
    _add_db(history)
    history.add_argument("--gate", action="store_true", help="judge the newest run: exit 0, 3 or 5")
    _add_thresholds(history)
    history.add_argument(
        "--min-runs",
        type=_at_least_2,
        default=5,
        help="comparable runs needed before the newest for a verdict (default: %(default)s)",
    )
    history.add_argument(
        "--max-p",
        type=_probability,
        default=DEFAULT_MAX_P,
        help="significance level of a change point (default: %(default)s)",
    )
    history.add_argument(
        "--last",
        type=_at_least_2,
        default=DEFAULT_LAST_RUNS,
        metavar="N",
        help="analyse and show the newest N runs; older ones are counted, not analysed (default: %(default)s)",
    )
    history.add_argument("--json", action="store_true", help="print the history as JSON instead of a table")
    history.add_argument(
        "--noise",
        action="store_true",
        help="print each figure's noise on the newest run's testbed instead, its band, and whether the "
        "thresholds can be judged against it (after `maestro test --calibrate N`)",
    )
    history.add_argument("--html", type=Path, help="also write the history page to this file")
    history.add_argument(
        "--export",
        type=_export_spec,
        action="append",
        default=[],
        metavar="FORMAT:PATH",
        help="also write the history for another tool (PATH - : standard output); FORMAT: otava (CSV of the "
        "comparable runs), bencher (BMF JSON), github-bigger / github-smaller (github-action-benchmark's "
        "customBiggerIsBetter / customSmallerIsBetter JSON) of the newest run, refused (exit 4) when it is "
        "invalid, failed or generator-bound; repeatable",
    )
    history.add_argument(
        "--webhook-file",
        type=Path,
        help=f"a file (mode 600) holding a URL to POST to on a REGRESSION or an invalid newest run (or ${WEBHOOK_ENV})",
    )
    history.add_argument(
        "--webhook-format",
        choices=("json", "slack"),
        default="json",
        help='json: the verdict, why, findings, test id and report; slack: {"text": ...} (default: %(default)s)',
    )
    add_log_level(history, "warning")
    aba = sub.add_parser(
        "aba",
        help="judge an A-B-A test's candidate against both its baselines: PASS, REGRESSION or INCONCLUSIVE",
        description="Judge the candidate of the A-B-A test TEST_ID (baseline, candidate, baseline again: "
        "coordinator.AbaTest) against both baselines, figure by figure: the candidate's mean against the "
        "baselines' beyond the threshold and the noise band of the comparison, and worse than each baseline. "
        "Exit 0 (PASS), 3 (REGRESSION) or 5 (INCONCLUSIVE: a noise band wider than a threshold, baselines "
        "drifted apart, a run that measured no SUT), with one line saying why.",
    )
    aba.add_argument("test_id", help="the A-B-A test's id (its phases are TEST_ID.a1-01, .b-01, .a2-01...)")
    where = aba.add_mutually_exclusive_group()
    where.add_argument("--results", type=Path, default=Path("results"), help="a results folder (default: %(default)s)")
    where.add_argument("--server", help="a data server's URL instead, e.g. http://lab-data:8080")
    _add_thresholds(aba)
    aba.add_argument(
        "--max-drift",
        type=_threshold,
        help="how far apart the two baselines may be, beyond their own noise (default: the figure's threshold)",
    )
    aba.add_argument("--json", action="store_true", help="also print the verdict as JSON")
    add_log_level(aba, "warning")
    index = sub.add_parser(
        "index",
        help="rebuild the results index of a results folder from its files",
        description="Read every test.json under RESULTS again into the results index (which `maestro history` "
        "and the data server otherwise bring up to date with the files as they read it).",
    )
    index.add_argument("results", type=Path, help="the results folder")
    _add_db(index)
    add_log_level(index, "warning")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="maestro", description="The data server and report browser; the reporter.", fromfile_prefix_chars="@"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineErrors)
    serve = sub.add_parser(
        "serve",
        help="run the data server",
        description="Run the data server: it takes the peers' uploads under --data, serves the results, reports, "
        "live pages, history and /metrics, and builds a report when one is asked for.",
    )
    serve.add_argument("--data", type=Path, default=Path("results"), help="the data root (default: %(default)s)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    serve.add_argument(
        "--token-file",
        type=Path,
        default=env_path(TOKEN_FILE_ENV),
        help="refuse uploads without the bearer token in this file (mode 600); reading stays open "
        "(default: $MAESTRO_TOKEN_FILE, else none)",
    )
    _add_db(serve)
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
        return _report_or_say_why(args)
    if args.command == "builder":
        from reports.report_builder import run_builder  # noqa: PLC0415 - Spark only here

        return run_builder(args.results.resolve(), sys.stdin)
    if args.command == "history":
        return _history(args)
    if args.command == "index":
        return _index(args)
    if args.command == "aba":
        return _aba(args)
    try:
        token = read_token_file(args.token_file).encode() if args.token_file else None
    except SecretFileError as exc:
        print(f"maestro serve: {exc}", file=sys.stderr)
        return 2
    try:
        app = create_app(args.data, token, db=args.db)
    except (OSError, ResultsIndexError) as exc:
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

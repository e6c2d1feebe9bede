"""`maestro run`, `maestro test`, and the commands handed to the reports package (`report`,
`serve`); `maestro demo` is in `coordinator.cli.demo`.

`--local` (and `demo`) start what the test needs on this machine: an embedded control broker
unless --broker is given, the data server over --data, one worker daemon per sender and
receiver. Every run prints its test id and where its files are, and exits 1 when the test
failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from coordinator.cli.collect import add_collect
from coordinator.cli.demo import add_demo
from coordinator.cli.support import (
    EXIT_CANNOT_RUN,
    EXIT_FAILED,
    add_where,
    cluster,
    conclude,
    exit_code,
    key_value,
    live_page,
    report,
    scalar,
)
from coordinator.definitions import DefinitionError, TestDefinition, workload
from coordinator.definitions.declared import KINDS, build_test, load_test_file
from coordinator.outcome.results import new_test_id
from coordinator.outcome.storage import DATA_SERVER_ENV
from coordinator.running.runner import FINISHED
from coordinator.topology.cli import add_topology_command
from protocol.broker_url import BROKER_ENV, DEFAULT_BROKER_URL
from protocol.secrets import redact_text
from protocol.upload import UploadError, upload_bytes

__all__ = ["add_commands"]

# --- maestro test ---------------------------------------------------------------------------


def _add_test(commands: Any) -> None:
    p = commands.add_parser(
        "test",
        help="run a common test without a script",
        description="Run a fixed-rate, unbounded, request-reply or incremental test (or a search, repeated or "
        "sweep series). With --file, the test is read from a TOML file (see docs/scripts.md), and each flag "
        "given overrides the file's value (options, labels and fail conditions key by key); the first line "
        "printed is the test as it will run.",
    )
    p.add_argument("kind", nargs="?", choices=KINDS, help="the test kind (default: fixed-rate, or the file's)")
    p.add_argument("--file", type=Path, help="a test declared in TOML")
    p.add_argument("--send-url", action="append", default=[], help="SUT URL senders publish to (repeatable)")
    p.add_argument("--receive-url", action="append", default=[], help="SUT URL receivers consume from (default: send)")
    p.add_argument("--rate", type=float, help="msg/s per client; 0 = unbounded (default: 100)")
    p.add_argument("--size", help="bytes per message: 256, ~256, 100-1000, 10KB (default: 256)")
    p.add_argument("--parallel", type=int, help="clients per sender and receiver (default: 1)")
    p.add_argument("--duration", help="120s, 10m… (default: 60s)")
    p.add_argument("--count", type=int, help="messages per sender instead of a duration")
    p.add_argument("--warm-up", help="time left out of the figures (default: 0)")
    p.add_argument("--senders", type=int, help="sender workers (default: 1)")
    p.add_argument("--receivers", type=int, help="receiver workers (default: 1)")
    p.add_argument("--name", help="a name for the test")
    p.add_argument("--test-id", help="the test id (default: time + random)")
    p.add_argument("--option", type=key_value, action="append", default=[], help="another SET option, KEY=VALUE")
    p.add_argument("--label", type=key_value, action="append", default=[], help="a label, KEY=VALUE (repeatable)")
    p.add_argument("--inspector", action="append", default=[], help="NAME[=MANAGEMENT-URL] (repeatable)")
    p.add_argument("--agent", action="append", default=[], help="agent peer NAME that joins (repeatable)")
    fail = p.add_argument_group("fail conditions")
    fail.add_argument("--fail-latency-ms", type=float, help="bound on each second's latency (default: none)")
    fail.add_argument("--fail-percentile", type=float, help="the percentile it bounds (default: 99)")
    fail.add_argument(
        "--fail-policy", choices=["soft", "hard"], help="soft: the percentile; hard: the max (default: soft)"
    )
    fail.add_argument("--fail-min-rate-ratio", type=float, help="achieved/target rate below this fails (default: 0)")
    fail.add_argument("--fail-max-loss-ratio", type=float, help="lost/sent above this fails (default: 0)")
    fail.add_argument("--fail-stall-s", type=float, help="no progress this long fails (default: 30)")
    fail.add_argument(
        "--fail-latency-uncertainty-ratio",
        type=float,
        help="latency across hosts is a figure only while the clocks are known to within this fraction of its "
        "p50 (default: 0.1; 0: no bound)",
    )
    fail.add_argument(
        "--fail-untrusted-latency",
        choices=["invalid", "failure", "warn"],
        help="what a test whose latency is no figure (a clamped sample, a clock step, clocks known worse than "
        "the bound) becomes (default: invalid, exit code 4)",
    )
    fail.add_argument(
        "--fail-max-generator-shortfall",
        type=float,
        help="a run whose load generator was the limit and whose senders fell more than this fraction short of "
        "the target measured the generator, not the SUT: invalid (default: 0.05)",
    )
    _add_request_reply_flags(p)
    inc = p.add_argument_group("incremental")
    inc.add_argument("--initial-rate", type=float, help="msg/s per client of the first step (needed)")
    inc.add_argument("--ceiling-rate", type=float, help="the highest rate per client; then clients grow (needed)")
    inc.add_argument("--rate-step", type=float, help="msg/s per client added each step (needed)")
    inc.add_argument("--initial-parallel", type=int, help="clients of the first steps (default: 1)")
    inc.add_argument("--ceiling-parallel", type=int, help="the most clients (default: 1)")
    inc.add_argument("--parallel-step", type=int, help="clients added past the rate's ceiling (default: 1)")
    search = p.add_argument_group("search (bisection on the rate per client)")
    search.add_argument("--low-rate", type=float, help="the lowest rate per client to try (needed)")
    search.add_argument("--high-rate", type=float, help="the highest rate per client to try (needed)")
    search.add_argument("--resolution", type=float, help="stop when the gap is under this fraction (default: 0.05)")
    rep = p.add_argument_group("repeated")
    rep.add_argument("--times", type=int, help="repetitions (default: 3)")
    rep.add_argument(
        "--calibrate",
        type=int,
        metavar="N",
        help="run the test N times back to back (at least 5) to measure its noise on this testbed: a repeated "
        "test whose every run counts in the history of --name (`maestro history NAME --noise` shows it; "
        "`--gate` judges the next night against it)",
    )
    sweep = p.add_argument_group("sweep")
    sweep.add_argument(
        "--grid",
        type=key_value,
        action="append",
        default=[],
        help="KEY=V1,V2,… (repeatable): rate, parallel, size, option.NAME or url.NAME",
    )
    add_where(p)
    p.set_defaults(run=cmd_test)


class _Once(argparse.Action):
    """A flag that takes one value: a second was kept over the first without a word, and a
    request/reply test given two request URLs ran on the last alone."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *_: Any) -> None:
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{'/'.join(self.option_strings)} is given twice: a request/reply test takes one")
        setattr(namespace, self.dest, values)


def _add_request_reply_flags(p: argparse.ArgumentParser) -> None:
    rr = p.add_argument_group("request-reply (a closed system: senders request, receivers reply)")
    rr.add_argument(
        "--request-url", action=_Once, help="SUT URL requests go to (a request-reply test needs it; no default)"
    )
    rr.add_argument(
        "--reply-url",
        action=_Once,
        help="the reply address on the same broker, e.g. amqp://h/amq.rabbitmq.reply-to (default: none: the "
        "driver's own, for AMQP a server-named queue per client; docs/sut-urls.md)",
    )
    rr.add_argument("--clients", type=int, help="requesting clients per sender (default: --parallel)")
    rr.add_argument("--outstanding", type=int, help="requests a client waits on at once (default: 1)")
    rr.add_argument("--think-time", help="from a reply to the next request: 10ms, exp:10ms (default: 0)")
    rr.add_argument("--service-time", help="the replier's time per request: 5ms, exp:5ms (default: 0)")
    rr.add_argument("--request-timeout", help="a reply later than this counts the request timed out (default: 5s)")
    rr.add_argument("--repliers", type=int, help="replying workers (default: --receivers)")


_SEARCH_FLAGS = ("low_rate", "high_rate", "resolution")
_FLAG_FIELDS = ("rate", "size", "parallel", "duration", "count", "senders", "receivers", "name")
_FAIL_FLAGS = {
    "fail_latency_ms": "latency_ms",
    "fail_percentile": "latency_percentile",
    "fail_policy": "latency_policy",
    "fail_min_rate_ratio": "min_rate_ratio",
    "fail_max_loss_ratio": "max_loss_ratio",
    "fail_stall_s": "stall_s",
    "fail_latency_uncertainty_ratio": "latency_uncertainty_ratio",
    "fail_untrusted_latency": "untrusted_latency",
    "fail_max_generator_shortfall": "max_generator_shortfall",
}
_REQUEST_REPLY_FLAGS = (
    "request_url",
    "reply_url",
    "clients",
    "outstanding",
    "think_time",
    "service_time",
    "request_timeout",
    "repliers",
)
_INCREMENTAL_FLAGS = (
    "initial_rate",
    "ceiling_rate",
    "rate_step",
    "initial_parallel",
    "ceiling_parallel",
    "parallel_step",
)


def test_from_args(args: argparse.Namespace) -> tuple[TestDefinition, str | None]:
    """The test the command line defines; with `--file`, the file's, with each flag given over
    the file's value (options, labels and fail conditions key by key)."""
    table = _given_flags(args)
    if args.file:
        return load_test_file(args.file, table)
    if args.kind == "request-reply" and not args.request_url:
        raise DefinitionError("a request-reply test needs --request-url")
    if not args.send_url and not args.request_url:
        raise DefinitionError("--send-url is needed (or --request-url, or --file)")
    kind = table.pop("kind", "fixed-rate")
    series: dict[str, Any] = {"repeated": {"times": 3}, "sweep": {"grid": {}}}
    if kind in series:
        table[kind] = series[kind] | table.get(kind, {})
    return build_test(kind, table), None


def _given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags given say, as a test file's table (a flag not given: not in it)."""
    names = (*_FLAG_FIELDS, *_REQUEST_REPLY_FLAGS)
    table: dict[str, Any] = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.kind:
        table["kind"] = args.kind
    for flag in ("send_url", "receive_url"):
        if urls := getattr(args, flag):
            table[flag] = urls if len(urls) > 1 else urls[0]
    if args.warm_up is not None:
        table["warm_up"] = args.warm_up
    if args.option:
        table["options"] = {k: scalar(v) for k, v in args.option}
    if args.label:
        table["labels"] = dict(args.label)
    if args.inspector:
        table["inspectors"] = args.inspector
    if args.agent:
        table["agents"] = args.agent
    fail = {field: getattr(args, flag) for flag, field in _FAIL_FLAGS.items() if getattr(args, flag) is not None}
    if fail:
        table["fail"] = fail
    series: dict[str, dict[str, Any]] = {
        "incremental": {k: getattr(args, k) for k in _INCREMENTAL_FLAGS if getattr(args, k) is not None},
        "search": {k: getattr(args, k) for k in _SEARCH_FLAGS if getattr(args, k) is not None},
        "repeated": {"times": args.times} if args.times is not None else {},
        "sweep": {"grid": {key: [scalar(v) for v in values.split(",")] for key, values in args.grid}},
    }
    if not args.grid:
        del series["sweep"]
    kind = args.kind or "fixed-rate"
    if series.get(kind):
        table[kind] = series[kind]
    if args.calibrate is not None:
        _calibration(args, table)
    return table


def _calibration(args: argparse.Namespace, table: dict[str, Any]) -> None:
    """`--calibrate N`: the test, N times, as a repeated test (each run one of its history's)."""
    if args.kind not in (None, "fixed-rate", "unbounded", "request-reply"):
        raise DefinitionError(f"--calibrate repeats a fixed-rate, unbounded or request-reply test, not a {args.kind}")
    if args.calibrate < 5:
        raise DefinitionError(f"--calibrate {args.calibrate}: the gate judges from 5 comparable runs, so at least 5")
    if not args.name and not args.file:
        raise DefinitionError("--calibrate needs --name: its runs are the history of the test of that name")
    if args.kind == "unbounded":
        table.setdefault("rate", 0.0)
    table["kind"] = "repeated"
    table["repeated"] = {"times": args.calibrate}


def cmd_test(args: argparse.Namespace) -> int:
    try:
        test, text = test_from_args(args)
    except (DefinitionError, TypeError) as exc:
        print(f"maestro test: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(f"test:    {workload(test)}", flush=True)
    test_id = args.test_id or new_test_id()
    with cluster(args, test, args.local) as maestro:
        maestro.local_data_root = args.data
        print(f"test id: {test_id}", flush=True)
        print(f"live:    {live_page(maestro.data_server_url(), test, test_id)}", flush=True)
        if text is not None:  # before the run: a coordinator that dies leaves it stored
            _store_definition(maestro.data_server_url(), test_id, text, maestro.upload_token)
        result = maestro.run(test, test_id=test_id, progress=not args.quiet, log_interval_s=args.log_interval)
        root = maestro.local_root
        dead = maestro.dead_local_processes()
    print(result)
    return conclude("test", result, report(result, root, args.no_report), dead)


def _store_definition(data_server: str, test_id: str, text: str, token: str | None) -> None:
    try:
        upload_bytes(data_server, test_id, "definition.toml", redact_text(text).encode(), replace=True, token=token)
    except UploadError as exc:
        print(f"maestro test: could not store the definition: {exc}", file=sys.stderr)


# --- maestro run ----------------------------------------------------------------------------


def _add_run(commands: Any) -> None:
    p = commands.add_parser(
        "run",
        help="run a test script (Python)",
        description="Run a Python test script. --broker and --data-server reach the script as $MAESTRO_BROKER and "
        "$MAESTRO_DATA_SERVER, so Maestro.connect() and maestro.run() use them. Exits 1 if a test it ran failed.",
    )
    p.add_argument("script", type=Path, help="the script; options for maestro go before it")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script (after it)")
    p.add_argument("--broker", help=f"control broker URL (default: $MAESTRO_BROKER, or {DEFAULT_BROKER_URL})")
    p.add_argument(
        "--data-server", help="data server URL (default: $MAESTRO_DATA_SERVER, or one the script's Maestro starts)"
    )
    p.set_defaults(run=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if not args.script.is_file():
        print(f"maestro run: no script {args.script}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.broker:
        os.environ[BROKER_ENV] = args.broker
    if args.data_server:
        os.environ[DATA_SERVER_ENV] = args.data_server
    FINISHED.clear()
    sys.argv = [str(args.script), *args.args]
    sys.path.insert(0, str(args.script.resolve().parent))
    try:
        runpy.run_path(str(args.script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    for result in FINISHED:
        if not result.passed:
            print(f"maestro run: test {result.test_id} {result.outcome}: {result.reason}", file=sys.stderr)
    return exit_code(FINISHED)


# --- maestro report, maestro serve ------------------------------------------------------------

# Commands of the reports package: their arguments are defined there, once, and everything after
# the command name goes to it. A process of its own: the coordinator does not import reports.
DELEGATED = {
    "report": "write the HTML report and summary.json of tests (PySpark); --baseline gates on regressions",
    "serve": "run the data server and report browser (peers upload results to it)",
    "history": "every run of a test by name with change points in its figures; --gate: PASS, REGRESSION or "
    "INCONCLUSIVE",
    "aba": "judge an A-B-A test's candidate against both its baselines: PASS, REGRESSION or INCONCLUSIVE",
    "index": "rebuild the results index (SQLite beside the results, or --db postgresql://...) from the files",
}


def _add_delegated(commands: Any) -> None:
    for name, text in DELEGATED.items():
        # No -h of its own: `maestro report --help` is answered by the reports package.
        p = commands.add_parser(name, help=text, add_help=False)
        p.set_defaults(run=run_delegated)


def run_delegated(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "reports", args.command, *args.delegated]
    os.execv(sys.executable, argv)
    return 0  # not reached


def add_commands(commands: Any) -> None:
    add_demo(commands)
    add_collect(commands)
    _add_run(commands)
    _add_test(commands)
    add_topology_command(commands)
    _add_delegated(commands)

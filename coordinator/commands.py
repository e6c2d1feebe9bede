"""`maestro run`, `maestro test`, `maestro demo` and `maestro serve`.

`--local` (and `demo`) start what the test needs on this machine: an embedded control broker
unless --broker is given, the data server over --data, one worker daemon per sender and
receiver. Every run prints its test id and where its files are, and exits 1 when the test
failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coordinator.declared import KINDS, build_test, load_test_file
from coordinator.definitions import DefinitionError, FixedRateTest, TestDefinition
from coordinator.executor import FINISHED, TestResult, new_test_id
from coordinator.local import LocalCluster, LocalError
from coordinator.maestro import Maestro
from coordinator.topology.cli import add_topology_command
from protocol.broker_url import default_broker_url
from protocol.secrets import redact_text
from protocol.topics import DEFAULT_PREFIX
from protocol.upload import UploadError, upload_bytes

__all__ = ["add_commands"]

EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def _scalar(text: str) -> Any:
    """A command-line value as the option parsers expect it: numbers as numbers."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


# --- where the test runs --------------------------------------------------------------------


@dataclass
class Where:
    broker: str | None
    topic_prefix: str
    data: Path
    data_server: str | None
    local: bool


def _add_where(parser: argparse.ArgumentParser, local_flag: bool = True) -> None:
    parser.add_argument("--broker", help="control broker URL (default: $MAESTRO_BROKER, or embedded with --local)")
    parser.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    parser.add_argument(
        "--data-server", help="data server URL peers upload to (default: $MAESTRO_DATA_SERVER, or one started here)"
    )
    parser.add_argument(
        "--data", type=Path, default=Path("results"), help="results folder of a local run (default: %(default)s)"
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    parser.add_argument("--quiet", action="store_true", help="no live progress line")
    if local_flag:
        parser.add_argument(
            "--local", action="store_true", help="start the control broker, data server and daemons on this machine"
        )


@contextmanager
def _cluster(args: argparse.Namespace, test: TestDefinition, local: bool) -> Iterator[Maestro]:
    """A connected Maestro; with `local`, on services and daemons started here first."""
    if local:
        base = test if isinstance(test, FixedRateTest) else test.base
        workers = sum(f.senders + f.receivers for f in base.all_flows())
        with Maestro.local(
            workers,
            inspectors=1 if base.inspectors else 0,
            agents=base.agents,
            data=args.data,
            broker=args.broker,
            topic_prefix=args.topic_prefix,
        ) as maestro:
            yield maestro
        return
    with Maestro.connect(
        args.broker or default_broker_url(), topic_prefix=args.topic_prefix, data_server=args.data_server
    ) as maestro:
        yield maestro


def _report(result: TestResult, root: Path | None, no_report: bool) -> None:
    where = root / result.test_id if root is not None else result.url
    print(f"test id: {result.test_id}")
    print(f"files:   {where}")
    if no_report:
        return
    if root is None:
        print(f"report:  the results are on {result.data_server}; run `maestro report DIR {result.test_id}` there")
        return
    ids = [result.test_id, *(step.test_id for step in result.steps)]
    run = subprocess.run([sys.executable, "-m", "reports", "report", str(root), *ids], check=False)
    if run.returncode == 0:
        print(f"report:  {root / result.test_id / 'report' / 'index.html'}")
    else:
        print(f"report:  failed (exit {run.returncode}); the files are intact, run `maestro report` again")


# --- maestro test ---------------------------------------------------------------------------


def _add_test(commands: Any) -> None:
    p = commands.add_parser(
        "test",
        help="run a common test without a script",
        description="Run a fixed-rate, unbounded or incremental test. With --file, the test is read from a TOML "
        "file (see coordinator/declared.py); flags then override nothing.",
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
    p.add_argument("--option", type=_key_value, action="append", default=[], help="another SET option, KEY=VALUE")
    p.add_argument("--label", type=_key_value, action="append", default=[], help="a label, KEY=VALUE (repeatable)")
    p.add_argument("--inspector", action="append", default=[], help="NAME[=MANAGEMENT-URL] (repeatable)")
    p.add_argument("--agent", action="append", default=[], help="agent peer NAME that joins (repeatable)")
    fail = p.add_argument_group("fail conditions")
    fail.add_argument("--fail-latency-ms", type=float, help="bound on each second's latency (default: none)")
    fail.add_argument("--fail-percentile", type=float, help="the percentile it bounds (default: 99)")
    fail.add_argument("--fail-policy", choices=["soft", "hard"], help="soft: the percentile; hard: the max")
    fail.add_argument("--fail-min-rate-ratio", type=float, help="achieved/target rate below this fails (default: 0)")
    fail.add_argument("--fail-max-loss-ratio", type=float, help="lost/sent above this fails (default: 0)")
    fail.add_argument("--fail-stall-s", type=float, help="no progress this long fails (default: 30)")
    inc = p.add_argument_group("incremental")
    inc.add_argument("--initial-rate", type=float)
    inc.add_argument("--ceiling-rate", type=float)
    inc.add_argument("--rate-step", type=float)
    inc.add_argument("--initial-parallel", type=int)
    inc.add_argument("--ceiling-parallel", type=int)
    inc.add_argument("--parallel-step", type=int)
    search = p.add_argument_group("search (bisection on the rate per client)")
    search.add_argument("--low-rate", type=float)
    search.add_argument("--high-rate", type=float)
    search.add_argument("--resolution", type=float, help="stop when the gap is under this fraction (default 0.05)")
    rep = p.add_argument_group("repeated")
    rep.add_argument("--times", type=int, help="repetitions (default: 3)")
    sweep = p.add_argument_group("sweep")
    sweep.add_argument(
        "--grid",
        type=_key_value,
        action="append",
        default=[],
        help="KEY=V1,V2,… (repeatable): rate, parallel, size, option.NAME or url.NAME",
    )
    _add_where(p)
    p.set_defaults(run=cmd_test)


_FLAG_FIELDS = ("rate", "size", "parallel", "duration", "count", "senders", "receivers", "name")
_FAIL_FLAGS = {
    "fail_latency_ms": "latency_ms",
    "fail_percentile": "latency_percentile",
    "fail_policy": "latency_policy",
    "fail_min_rate_ratio": "min_rate_ratio",
    "fail_max_loss_ratio": "max_loss_ratio",
    "fail_stall_s": "stall_s",
}
_INCREMENTAL_FLAGS = (
    "initial_rate",
    "ceiling_rate",
    "rate_step",
    "initial_parallel",
    "ceiling_parallel",
    "parallel_step",
)


def test_from_args(args: argparse.Namespace) -> tuple[TestDefinition, str | None]:
    if args.file:
        test, text = load_test_file(args.file)
        return test, text
    table: dict[str, Any] = {k: getattr(args, k) for k in _FLAG_FIELDS if getattr(args, k) is not None}
    if not args.send_url:
        raise DefinitionError("--send-url is needed (or --file)")
    table["send_url"] = args.send_url if len(args.send_url) > 1 else args.send_url[0]
    if args.receive_url:
        table["receive_url"] = args.receive_url if len(args.receive_url) > 1 else args.receive_url[0]
    if args.warm_up is not None:
        table["warm_up"] = args.warm_up
    table["options"] = {k: _scalar(v) for k, v in args.option}
    table["labels"] = dict(args.label)
    table["inspectors"] = args.inspector
    table["agents"] = args.agent
    fail = {field: getattr(args, flag) for flag, field in _FAIL_FLAGS.items() if getattr(args, flag) is not None}
    if fail:
        table["fail"] = fail
    kind = args.kind or "fixed-rate"
    series: dict[str, Any] = {
        "incremental": {k: getattr(args, k) for k in _INCREMENTAL_FLAGS if getattr(args, k) is not None},
        "search": {
            k: getattr(args, k) for k in ("low_rate", "high_rate", "resolution") if getattr(args, k) is not None
        },
        "repeated": {"times": args.times if args.times is not None else 3},
        "sweep": {"grid": {key: [_scalar(v) for v in values.split(",")] for key, values in args.grid}},
    }
    if kind in series:
        table[kind] = series[kind]
    return build_test(kind, table), None


def cmd_test(args: argparse.Namespace) -> int:
    try:
        test, text = test_from_args(args)
    except (DefinitionError, TypeError) as exc:
        print(f"maestro test: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    test_id = args.test_id or new_test_id()
    with _cluster(args, test, args.local) as maestro:
        maestro.local_data_root = args.data
        print(f"test id: {test_id}", flush=True)
        result = maestro.run(test, test_id=test_id, progress=not args.quiet)
        if text is not None:
            _store_definition(result.data_server, test_id, text)
        root = maestro.local_root
    print(result)
    _report(result, root, args.no_report)
    return 0 if result.passed else EXIT_FAILED


def _store_definition(data_server: str, test_id: str, text: str) -> None:
    try:
        upload_bytes(data_server, test_id, "definition.toml", redact_text(text).encode(), replace=True)
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
    p.add_argument("--broker", help="control broker URL")
    p.add_argument("--data-server", help="data server URL")
    p.set_defaults(run=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if not args.script.is_file():
        print(f"maestro run: no script {args.script}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.broker:
        os.environ["MAESTRO_BROKER"] = args.broker
    if args.data_server:
        os.environ["MAESTRO_DATA_SERVER"] = args.data_server
    FINISHED.clear()
    sys.argv = [str(args.script), *args.args]
    sys.path.insert(0, str(args.script.resolve().parent))
    try:
        runpy.run_path(str(args.script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    failed = [r for r in FINISHED if not r.passed]
    for result in failed:
        print(f"maestro run: test {result.test_id} failed: {result.reason}", file=sys.stderr)
    return EXIT_FAILED if failed else 0


# --- maestro demo ---------------------------------------------------------------------------


def _add_demo(commands: Any) -> None:
    p = commands.add_parser(
        "demo",
        help="a short fixed-rate test on this machine, nothing else needed",
        description="Start an embedded control broker, the data server, a sender and a receiver, a SUT that ships "
        "with the Python packages (tansu, a Kafka-compatible broker; the embedded MQTT broker where tansu is not "
        "available), an inspector and an agent, run a short fixed-rate test, write the report and print where "
        "the results are.",
    )
    p.add_argument("--sut", help="a real SUT URL instead (amqp://, amqp10://, kafka://, mqtt://)")
    p.add_argument("--rate", type=float, default=100.0, help="msg/s per client (default: %(default)s)")
    p.add_argument("--parallel", type=int, default=2, help="clients (default: %(default)s)")
    p.add_argument("--duration", default="15s", help="(default: %(default)s)")
    p.add_argument("--warm-up", default="3s", help="(default: %(default)s)")
    _add_where(p, local_flag=False)
    p.set_defaults(run=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    root = args.data.resolve()
    run_dir = root / ".local" / time.strftime("%Y%m%d-%H%M%S")
    test_id = f"demo-{new_test_id()}"
    with LocalCluster(run_dir, topic_prefix=args.topic_prefix, broker_url=args.broker or "") as local:
        print(f"control broker: {local.broker_url}", flush=True)
        sut = args.sut or _demo_sut(local, args.parallel)
        print(f"SUT:            {sut}", flush=True)
        data_server = args.data_server or local.data_server(root)
        print(f"data server:    {data_server} (files under {root})", flush=True)
        test = FixedRateTest(
            send_url=sut,
            rate=args.rate,
            parallel=args.parallel,
            size=256,
            duration=args.duration,
            warm_up=args.warm_up,
            name="maestro demo",
            labels={"demo": True},
            inspectors=demo_inspectors(sut),
            agents=("demo-agent",),
            options={"inspector_interval_s": 1},
        )
        for role in ("receiver", "sender"):
            local.daemon("maestro-worker", f"demo-{role}", run_dir / "peers" / role, "--role", role)
        local.daemon("maestro-inspector", "demo-inspector", run_dir / "peers" / "inspector")
        # An agent with no configuration: it joins the test and may touch nothing.
        local.daemon("maestro-agent", "demo-agent", run_dir / "peers" / "agent")
        with Maestro.connect(
            local.broker_url, topic_prefix=args.topic_prefix, discover_s=0, data_server=data_server
        ) as maestro:
            maestro.wait_for_peers(4, timeout_s=30)
            print(f"inspectors:     {', '.join(i.split('=')[0] for i in test.inspectors)}", flush=True)
            print(f"test id:        {test_id}", flush=True)
            result = maestro.run(test, test_id=test_id, progress=not args.quiet)
    print(result)
    _report(result, root, args.no_report)
    return 0 if result.passed else EXIT_FAILED


def demo_inspectors(sut: str) -> tuple[str, ...]:
    """The host, and the inspector that fits the SUT where there is one: RabbitMQ's management
    API for amqp:// (on its default port, with the SUT URL's credentials)."""
    parts = urlsplit(sut)
    if parts.scheme in ("amqp", "amqps"):
        user = f"{parts.username or 'guest'}:{parts.password or 'guest'}@"
        return (f"rabbitmq=http://{user}{parts.hostname}:15672", "host")
    return ("host",)


def _demo_sut(local: LocalCluster, consumers: int) -> str:
    try:
        # A partition per consumer, or all but one of them would idle. tansu does not answer a
        # waiting fetch when data arrives, so librdkafka's 500 ms fetch.wait.max.ms would be the
        # latency the demo shows: a 2 ms wait makes it the broker's own.
        topic = f"maestro-demo-{uuid.uuid4().hex[:6]}"
        return local.tansu() + f"/{topic}?partitions={consumers}&fetch_wait_max_ms=2"
    except LocalError as exc:
        print(f"no tansu here ({exc}); the embedded MQTT broker serves as the SUT", file=sys.stderr)
        return f"{local.broker_url}/maestro/demo/{uuid.uuid4().hex[:6]}"


# --- maestro report, maestro serve ------------------------------------------------------------

# Commands of the reports package: their arguments are defined there, once, and everything after
# the command name goes to it. A process of its own: the coordinator does not import reports.
DELEGATED = {
    "report": "write the HTML report and summary.json of tests (PySpark); --baseline gates on regressions",
    "serve": "run the data server and report browser (peers upload results to it)",
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
    _add_demo(commands)
    _add_run(commands)
    _add_test(commands)
    add_topology_command(commands)
    _add_delegated(commands)

"""What the `maestro` commands that run tests share: exit codes, where a test runs (a lab or
this machine), and what is printed at the end."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.definitions import FixedRateTest, TestDefinition
from coordinator.errors import was_interrupted
from coordinator.outcome.results import TestResult
from coordinator.outcome.storage import DATA_SERVER_ENV
from coordinator.running.maestro import Maestro
from protocol.broker_url import BROKER_ENV, default_broker_url
from protocol.codes import ExitCode
from protocol.topics import DEFAULT_PREFIX

__all__ = [
    "EXIT_CANNOT_RUN",
    "EXIT_FAILED",
    "EXIT_INVALID",
    "Where",
    "add_where",
    "cluster",
    "conclude",
    "connected",
    "exit_code",
    "given_broker",
    "given_data_server",
    "key_value",
    "live_page",
    "report",
    "scalar",
]

EXIT_FAILED = ExitCode.FAILED
EXIT_CANNOT_RUN = ExitCode.CANNOT_RUN
EXIT_INVALID = ExitCode.INVALID
EXIT_INTERRUPTED = ExitCode.INTERRUPTED


def exit_code(results: list[TestResult]) -> int:
    """A failure above an invalid run, an invalid run above a success."""
    outcomes = {r.outcome for r in results}
    if outcomes - {"success", "invalid"}:
        return EXIT_FAILED
    return EXIT_INVALID if "invalid" in outcomes else 0


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def scalar(text: str) -> Any:
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


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is no number of seconds above 0")
    return seconds


def add_where(parser: argparse.ArgumentParser, local_flag: bool = True) -> None:
    embedded = "an embedded one started with --local" if local_flag else "an embedded one started here"
    parser.add_argument("--broker", help=f"control broker URL (default: $MAESTRO_BROKER, or {embedded})")
    parser.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    parser.add_argument(
        "--data-server", help="data server URL peers upload to (default: $MAESTRO_DATA_SERVER, or one started here)"
    )
    parser.add_argument(
        "--data", type=Path, default=Path("results"), help="results folder of a local run (default: %(default)s)"
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    parser.add_argument("--quiet", action="store_true", help="no live progress line")
    parser.add_argument(
        "--log-interval",
        type=_positive_seconds,
        default=1.0,
        metavar="SECONDS",
        help="without a terminal, a progress line every SECONDS (default: %(default)s)",
    )
    if local_flag:
        parser.add_argument(
            "--local", action="store_true", help="start the control broker, data server and daemons on this machine"
        )


def given_broker(args: argparse.Namespace) -> str | None:
    """--broker, else $MAESTRO_BROKER: with --local too (None: an embedded one is started)."""
    return args.broker or os.environ.get(BROKER_ENV) or None


def given_data_server(args: argparse.Namespace) -> str | None:
    """--data-server, else $MAESTRO_DATA_SERVER: with --local too (None: one is started here)."""
    return args.data_server or os.environ.get(DATA_SERVER_ENV) or None


def live_page(data_server: str, test: TestDefinition, test_id: str) -> str:
    """Where a running test is watched; a series' phases each run under a test id of their own,
    listed on the data server's front page."""
    base = data_server.rstrip("/")
    return f"{base}/live/{test_id}" if isinstance(test, FixedRateTest) else f"{base}/ (its phases, as they run)"


@contextmanager
def cluster(args: argparse.Namespace, test: TestDefinition, local: bool) -> Iterator[Maestro]:
    """A connected Maestro; with `local`, on services and daemons started here first."""
    if local:
        base = test if isinstance(test, FixedRateTest) else test.base
        workers = sum(f.senders + f.receivers for f in base.all_flows())
        with Maestro.local(
            workers,
            inspectors=1 if base.inspectors else 0,
            agents=base.agents,
            data=args.data,
            broker=given_broker(args),
            topic_prefix=args.topic_prefix,
            data_server=given_data_server(args),
        ) as maestro:
            yield maestro
        return
    with Maestro.connect(
        args.broker or default_broker_url(), topic_prefix=args.topic_prefix, data_server=args.data_server
    ) as maestro:
        yield maestro


@contextmanager
def connected(args: argparse.Namespace) -> Iterator[Maestro]:
    """A Maestro on --broker (no daemons started), uploading to --data-server or to one started
    here over --data."""
    with Maestro.connect(
        args.broker or default_broker_url(), topic_prefix=args.topic_prefix, discover_s=0, data_server=args.data_server
    ) as maestro:
        maestro.local_data_root = Path(args.data)
        yield maestro


def report(result: TestResult, root: Path | None, no_report: bool) -> str | None:
    """Print where the test's files are and write its report; what went wrong with the report,
    or None. After Ctrl-C the report is not built (its JVM would hold the terminal for seconds
    more): the files are kept for `maestro report`."""
    where = root / result.test_id if root is not None else result.url
    print(f"files:   {where}")
    if no_report:
        return None
    if was_interrupted():
        print(f"report:  not built (interrupted); `maestro report {root or 'RESULTS'} {result.test_id}` builds it")
        return None
    if root is None:
        print(f"report:  the results are on {result.data_server}; run `maestro report DIR {result.test_id}` there")
        return None
    ids = [result.test_id, *(step.test_id for step in result.steps)]
    # The reporter's own console lines pass through as they come; its last one says why it failed.
    last = ""
    with subprocess.Popen(
        # Its stdout (the reports' paths) is said once, below, in this command's words.
        [sys.executable, "-m", "reports", "report", str(root), *ids],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        for line in run.stderr or ():
            sys.stderr.write(line)
            last = line.strip() or last
    if run.returncode == 0:
        print(f"report:  {root / result.test_id / 'report' / 'index.html'}")
        return None
    print(f"report:  failed (exit {run.returncode}); the files are intact, run `maestro report` again")
    why = last.removeprefix("maestro report: ").removeprefix("failed: ")
    return f"exit {run.returncode}: {why}" if why else f"exit {run.returncode}"


def conclude(command: str, result: TestResult, report_failure: str | None, dead: dict[str, int]) -> int:
    """The exit code of a run, and when a part of it failed, one line naming each such part: the
    test, its report, a local process that died during it. A test that ran but did not measure
    the SUT (invalid), where nothing else failed, says so and exits EXIT_INVALID."""
    parts = [] if result.outcome in ("success", "invalid") else [f"the test ({result.reason})"]
    if report_failure is not None:
        parts.append(f"the report ({report_failure})")
    parts += [f"the local process {name} (exited with code {code})" for name, code in sorted(dead.items())]
    if parts:
        print(f"maestro {command}: failed: {'; '.join(parts)}", file=sys.stderr)
        # Ctrl-C or SIGTERM: the test was stopped and collected, as its reason says; 130 as a shell's.
        return EXIT_INTERRUPTED if was_interrupted() else EXIT_FAILED
    if result.outcome == "invalid":
        print(f"maestro {command}: invalid: the test did not measure the SUT ({result.reason})", file=sys.stderr)
        return EXIT_INVALID
    return 0

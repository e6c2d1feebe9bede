"""What the `maestro` commands that run tests share: exit codes, where a test runs (a lab or
this machine), and what is printed at the end."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.definitions import FixedRateTest, TestDefinition
from coordinator.maestro import Maestro
from coordinator.results import TestResult
from protocol.broker_url import default_broker_url
from protocol.topics import DEFAULT_PREFIX

__all__ = [
    "EXIT_CANNOT_RUN",
    "EXIT_FAILED",
    "Where",
    "add_where",
    "cluster",
    "connected",
    "key_value",
    "report",
    "scalar",
]

EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2


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


def add_where(parser: argparse.ArgumentParser, local_flag: bool = True) -> None:
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
            broker=args.broker,
            topic_prefix=args.topic_prefix,
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


def report(result: TestResult, root: Path | None, no_report: bool) -> None:
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

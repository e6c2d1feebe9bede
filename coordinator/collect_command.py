"""`maestro collect TEST-ID`: a test's files from every live peer that still holds them, after
the coordinator that ran it was lost, or after a collection that left some behind (the data
server was down). The figures are then read again and test.json brought up to date: the one
the coordinator wrote, or a new one saying the coordinator never finished."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli_support import EXIT_CANNOT_RUN, EXIT_FAILED, connected, report
from coordinator.collection import collect
from coordinator.results import TestResult, now_iso
from coordinator.storage import DataServer
from protocol.topics import DEFAULT_PREFIX

__all__ = ["add_collect", "cmd_collect"]


def add_collect(commands: Any) -> None:
    p = commands.add_parser(
        "collect",
        help="gather a test's files from the peers that still hold them",
        description="Ask every live peer on the control broker for a test's files (after its coordinator was "
        "lost, or the data server was down at collection), upload them to the data server, update test.json "
        "and write the report.",
    )
    p.add_argument("test_id", metavar="TEST-ID")
    p.add_argument("--broker", help="control broker URL (default: $MAESTRO_BROKER)")
    p.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    p.add_argument("--data-server", help="data server URL (default: $MAESTRO_DATA_SERVER, or one started here)")
    p.add_argument("--data", default="results", help="results folder when the data server is started here")
    p.add_argument("--discover", type=float, default=2.0, help="seconds to wait for peers to answer (default: 2)")
    p.add_argument("--no-report", action="store_true", help="do not write the report")
    p.set_defaults(run=cmd_collect)


def cmd_collect(args: argparse.Namespace) -> int:
    with connected(args) as maestro:
        peers = maestro.discover(args.discover)
        if not peers:
            print("maestro collect: no peer answered on the control broker", file=sys.stderr)
            return EXIT_CANNOT_RUN
        store = DataServer(maestro.data_server_url(), maestro.upload_token)
        collected = collect(maestro, peers, args.test_id, store.url)
        # A peer that never had the test answers "0 files": only those with files are its cast.
        holders = {who: why for who, why in collected.outcome.items() if not why.startswith("0 files")}
        for who, why in sorted(holders.items()):
            print(f"  {who}: {why}")
        record = (
            store.record(args.test_id)
            or store.unstored_record(args.test_id)
            or _record_of_a_lost_coordinator(args.test_id)
        )
        # The clocks of a record kept here (not yet on the server) correct its latency too.
        figures = store.summary(args.test_id, record.get("peers"))
        record.setdefault("collection", {}).update(holders)
        record.setdefault("notes", []).append(
            f"collected by `maestro collect` at {now_iso()}: {len(holders)} peers had files"
            + (f"; {'; '.join(collected.failures)}" if collected.failures else "")
        )
        record["summary"] = figures
        result = TestResult(args.test_id, record["outcome"], record.get("reason"), figures, record, store.url)
        store.store(result, [result])
        root = maestro.local_root
    print(result)
    report(result, root, args.no_report)
    return EXIT_FAILED if collected.failures or "error" in figures else 0


def _record_of_a_lost_coordinator(test_id: str) -> dict[str, Any]:
    return {
        "test_id": test_id,
        "name": "",
        "kind": "unknown",
        "outcome": "failure",
        "reason": "the coordinator was lost before the test ended; its files were collected later",
        "started": "",  # unknown: the coordinator that knew is gone
        "ended": "",
    }

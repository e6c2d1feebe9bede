"""`maestro collect TEST-ID`: a test's files from every live peer that still holds them, after
the coordinator that ran it was lost, or after a collection that left some behind (the data
server was down). The figures are then read again and test.json brought up to date: the one
the coordinator wrote, or a new one saying the coordinator never finished."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from coordinator.cli.support import EXIT_CANNOT_RUN, EXIT_FAILED, connected, report
from coordinator.outcome.results import TestResult, now_iso
from coordinator.outcome.storage import DataServer
from coordinator.running.collection import collect
from protocol.broker_url import DEFAULT_BROKER_URL
from protocol.results import PeerRecord
from protocol.test_record import TestRecord
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
    p.add_argument("test_id", metavar="TEST-ID", help="the test whose files to gather (its folder's name)")
    p.add_argument("--broker", help=f"control broker URL (default: $MAESTRO_BROKER, or {DEFAULT_BROKER_URL})")
    p.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    p.add_argument("--data-server", help="data server URL (default: $MAESTRO_DATA_SERVER, or one started here)")
    p.add_argument(
        "--data", default="results", help="results folder when the data server is started here (default: %(default)s)"
    )
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
        # The coordinator's own record when it finished one; else the one it opened as the test
        # started (kind, name, labels, definition, start, peers and their clocks), completed.
        on_server = store.record(args.test_id)
        record = (
            (on_server if on_server is not None and on_server.outcome else None)
            or store.unstored_record(args.test_id)
            or _completed(on_server or TestRecord(args.test_id, kind="unknown"), store.peer_records(args.test_id))
        )
        # The clocks of a record kept here (not yet on the server) correct its latency too.
        figures = store.summary(args.test_id, record.peers, record.events or ())
        record = replace(record, collection={**(record.collection or {}), **holders}, summary=figures).noted(
            f"collected by `maestro collect` at {now_iso()}: {len(holders)} peers had files"
            + (f"; {'; '.join(collected.failures)}" if collected.failures else "")
        )
        # A closing record (the coordinator's, or one completed here) always has an outcome.
        outcome = record.outcome or "failure"
        result = TestResult(args.test_id, outcome, record.reason, figures, record, store.url)
        store.store(result, [result])
        root = maestro.local_root
    print(f"test id: {args.test_id}")
    print(result)
    if report(result, root, args.no_report) is not None or collected.failures or figures.error is not None:
        return EXIT_FAILED
    return 0


def _completed(opened: TestRecord, peers: list[PeerRecord]) -> TestRecord:
    """The record of a test whose coordinator was lost before it ended: as it was opened, with
    its end the last peer's (each peer.json says when its part ended), and the reason."""

    def when(key: str, pick: Any) -> str | None:
        stamps = [stamp for p in peers if (stamp := getattr(p, key))]
        return datetime.fromtimestamp(pick(stamps) / 1e9, UTC).isoformat() if stamps else None

    return replace(
        opened,
        outcome="failure",
        reason="the coordinator was lost before the test ended; its files were collected later",
        started=opened.started or when("started_ns", min) or "",
        ended=when("ended_ns", max) or "",
    )

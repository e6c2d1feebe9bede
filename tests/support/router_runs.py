"""The runs through a real Qpid Dispatch Router 1.19.0 kept in `qdrouter_runs/` (its README
says how each was made): their folders, and their three counts with the router's own beside
them, as reports.accounting makes them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from protocol.figures import Accounting, SenderFigures
from reports.accounting import accounting, client_of, sut_counters

RUNS = Path(__file__).with_name("qdrouter_runs")
FILES = ("amqp-management-links.csv", "amqp-management-addresses.csv")


def senders(run: str) -> list[SenderFigures]:
    """The run's senders' counts as the tool reported them (`run.json`)."""
    rows = json.loads((RUNS / run / "run.json").read_text())["per_sender"]
    return [
        SenderFigures.from_json(
            {
                "sender": row["sender"],
                "sut": row["sut"],
                "intended": row["intended"],
                "expected": row["sent"],
                "accepted": row["accepted"],
                "received": row["received"],
            }
        )
        for row in rows
    ]


def run_accounting(run: str, folder: Path | None = None) -> Accounting:
    """The run's three counts, with the router's counters read from `folder` (the run's own by
    default: a test may give a changed copy)."""
    figures = senders(run)
    return accounting(figures, sut_counters(folder or RUNS / run, [(s.sut, client_of(s.sender)) for s in figures]))


def cut_before(run: str, moment: str, folder: Path) -> Path:
    """A copy of the run's inspector files into `folder` with only the readings stamped before
    `moment` (ISO 8601, as the inspector stamps them): the run as if it had been read no later."""
    for name in FILES:
        source = RUNS / run / "inspector" / "i1" / name
        with source.open(newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or ())
            rows = [row for row in reader if row["timestamp"] < moment]
        target = folder / "inspector" / "i1" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)
    return folder

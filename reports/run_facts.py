"""What makes two runs of one test alike, read from their test.json: the workload (the definition
less what differs between runs of the same workload) and the SUT it ran against. The testbed's
fingerprint is protocol.testbed's, written as the run starts.
"""

from __future__ import annotations

import csv
import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from protocol.test_record import TestRecord
from reports.paths import is_plain

__all__ = ["inspected_version", "started_utc", "sut_of", "workload_hash"]

# Not the workload: names, labels (a build number, a night's date) and where results go.
_NOT_WORKLOAD = frozenset({"name", "labels", "test_id", "data_server"})
_URL_KEYS = ("send_url", "receive_url", "request_url")


def started_utc(record: TestRecord) -> str:
    """When a run started, in UTC (ISO, ms), for a history's order: its start, else its end, else
    the time its id was made at (maestro's ids begin YYYYmmdd-HHMMSS); "" where none says. Two
    offsets sorted as text put a run at +02:00 two hours late, and a missing start put tonight's
    run first, where the gate took the night before for the newest."""
    for text in (record.started, record.end):
        if text:
            try:
                when = datetime.fromisoformat(text)
            except ValueError:
                continue
            return (
                (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat(timespec="milliseconds")
            )
    try:
        made = datetime.strptime(record.test_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return ""
    return made.isoformat(timespec="milliseconds")


def workload_hash(definition: Mapping[str, Any] | None) -> str:
    """A short hash of what a run asked of the SUT. URLs count by scheme and options only: their
    host is the testbed's part and their path an id (scripts and tests name a queue per run)."""
    if not definition:
        return ""
    kept = {k: _without_ids(v) for k, v in definition.items() if k not in _NOT_WORKLOAD}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _without_ids(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_ids(v) for k, v in value.items() if k not in _NOT_WORKLOAD}
    if isinstance(value, list | tuple):
        return [_without_ids(v) for v in value]
    if isinstance(value, str) and "://" in value:
        url = urllib.parse.urlsplit(value)
        return f"{url.scheme}://?{url.query}"
    return value


def sut_of(record: TestRecord) -> tuple[str, str]:
    """The SUT's kind (its URL's scheme) and version, where the script states it (the label
    `sut_version`); "" for what is not known."""
    definition = record.definition
    labels = record.labels or definition.get("labels") or {}
    places = [definition, *(f for f in definition.get("flows") or () if isinstance(f, Mapping))]
    urls = [u for place in places for k in _URL_KEYS for u in _listed(place.get(k))]
    scheme = next((urllib.parse.urlsplit(u).scheme for u in urls if "://" in u), "")
    version = labels.get("sut_version") if isinstance(labels, Mapping) else None
    return scheme, str(version or "")


# The inspectors' data sets that carry the SUT's version: RabbitMQ's overview, a NATS server's
# varz, a Qpid Dispatch router's general entity (inspector/).
_VERSIONED = ("overview.csv", "server.csv", "general.csv")


def inspected_version(test_dir: Path) -> str:
    """The SUT's version as an inspector of the test read it (the first sample's that has one);
    "" where none did. Files and folders that are symbolic links are not followed."""
    inspectors = test_dir / "inspector"
    if not is_plain(inspectors) or not inspectors.is_dir():
        return ""
    for peer in sorted(p for p in inspectors.iterdir() if is_plain(p) and p.is_dir()):
        for name in _VERSIONED:
            path = peer / name
            if not is_plain(path) or not path.is_file():
                continue
            with path.open(newline="", errors="replace") as f:
                for row in csv.DictReader(f):
                    if version := (row.get("version") or "").strip():
                        return version[:100]
    return ""


def _listed(value: Any) -> list[str]:
    """A URL field's URLs: one, or a list of them (a flow over several endpoints)."""
    values = value if isinstance(value, list | tuple) else [value]
    return [v for v in values if isinstance(v, str)]

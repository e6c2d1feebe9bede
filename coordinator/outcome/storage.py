"""Where results go: the data server's figures for a test, and test.json and junit.xml beside
the peers' folders. A phase talks to a `ResultStore`; `DataServer` is the HTTP one."""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from coordinator.outcome.junit import junit_xml
from coordinator.outcome.results import TestResult
from protocol.atomic import write_text_atomically
from protocol.figures import TestFigures
from protocol.live import LiveUpdate
from protocol.results import PeerRecord
from protocol.runtime import resolve_test_dir
from protocol.secrets import redact_text
from protocol.test_record import PeerEntry, TestRecord
from protocol.upload import UploadError, upload_bytes

__all__ = ["DATA_SERVER_ENV", "DataServer", "ResultStore", "unstored_dir"]

log = logging.getLogger(__name__)

# The data server merges the peers' pieces (counts by second, HDR intervals): its work grows with
# the test's seconds, not its messages, so one fixed bound serves an hour's soak too.
_SUMMARY_TIMEOUT_S = 120.0
_LIVE_TIMEOUT_S = 5.0
# Where peers upload, when no --data-server (or data_server=) says.
DATA_SERVER_ENV = "MAESTRO_DATA_SERVER"


class ResultStore(Protocol):
    @property
    def url(self) -> str:
        """Where peers upload their files."""
        ...

    def summary(
        self, test_id: str, peers: Sequence[PeerEntry] | None = None, events: Sequence[Mapping[str, Any]] = ()
    ) -> TestFigures:
        """The test's figures, or why there are none (`TestFigures.error`). `peers` (test.json's,
        with their clocks): latency corrected by them, before test.json is stored; `events` (the
        agents' actions): the recovery after each fault measured."""
        ...

    def store(self, result: TestResult, cases: list[TestResult]) -> None:
        """test.json and junit.xml; a failure is noted in the result, never raised."""
        ...

    def post_live(self, test_id: str, update: LiveUpdate) -> str | None:
        """A running test's live statistics (coordinator.running.live); OSError when not taken.
        Why the test is to stop, when that was asked of the data server."""
        ...

    def open(self, test_id: str, record: TestRecord) -> None:
        """test.json as the test starts (no outcome yet), for `maestro collect` to complete if
        the coordinator dies; a failure is logged, never raised."""
        ...


@dataclass(frozen=True)
class DataServer:
    url: str
    token: str | None = field(default=None, repr=False)  # its bearer token for writes

    def summary(
        self, test_id: str, peers: Sequence[PeerEntry] | None = None, events: Sequence[Mapping[str, Any]] = ()
    ) -> TestFigures:
        url = f"{self.url.rstrip('/')}/api/results/{test_id}/summary"
        record = {"peers": [p.to_json() for p in peers]} if peers is not None else {}
        record |= {"events": [dict(e) for e in events]} if events else {}
        body = json.dumps(record, default=str).encode() if record else None
        request = urllib.request.Request(url, data=body, method="GET" if body is None else "POST")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=_SUMMARY_TIMEOUT_S) as response:
                # Its outcome and reason, of a test.json stored before, are not this phase's.
                return TestFigures.from_json(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            return TestFigures.missing(f"data server answered {exc.code}: {exc.read().decode(errors='replace')[:300]}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return TestFigures.missing(f"data server at {self.url}: {getattr(exc, 'reason', exc)}")

    def store(self, result: TestResult, cases: list[TestResult]) -> None:
        # No password from any URL reaches the results (the data server publishes them over HTTP).
        record = result.record.to_text().encode()
        junit = redact_text(junit_xml(result, cases).decode()).encode()
        try:
            upload_bytes(self.url, result.test_id, "test.json", record, replace=True, token=self.token)
            upload_bytes(self.url, result.test_id, "junit.xml", junit, replace=True, token=self.token)
        except UploadError as exc:
            # Kept here instead, for `maestro collect` to upload once the server is back.
            kept = unstored_dir(result.test_id)
            kept.mkdir(parents=True, exist_ok=True)
            write_text_atomically(kept / "test.json", record.decode())
            write_text_atomically(kept / "junit.xml", junit.decode())
            log.error("could not store test.json/junit.xml for %s (%s): kept in %s", result.test_id, exc, kept)
            result.record = result.record.noted(f"not stored on the data server ({exc}): kept in {kept}")

    def open(self, test_id: str, record: TestRecord) -> None:
        text = record.to_text().encode()
        try:
            # Once: the test waits on it, and the closing record is stored (or kept) at the end anyway.
            upload_bytes(self.url, test_id, "test.json", text, replace=True, token=self.token, attempts=1)
        except UploadError as exc:
            log.warning(
                "could not store the opening test.json of %s (%s): a lost coordinator's record is then "
                "rebuilt with less",
                test_id,
                exc,
            )

    def peer_records(self, test_id: str) -> list[PeerRecord]:
        """Every peer.json the data server holds for a test (as collected)."""
        base = self.url.rstrip("/")
        try:
            with urllib.request.urlopen(f"{base}/api/results/{test_id}", timeout=30) as response:
                files = [f["path"] for f in json.loads(response.read()).get("files", [])]
            records = []
            for path in sorted(p for p in files if p.endswith("/peer.json")):
                with urllib.request.urlopen(f"{base}/results/{test_id}/{path}", timeout=30) as response:
                    records.append(PeerRecord.from_json(json.loads(response.read())))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("could not read the peers' records of %s: %s", test_id, exc)
            return []
        return records

    def post_live(self, test_id: str, update: LiveUpdate) -> str | None:
        # No URL from the test reaches it: the update carries counters, names and hosts only.
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/api/live/{test_id}",
            data=json.dumps(update.to_json()).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=_LIVE_TIMEOUT_S) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise OSError(f"data server answered {exc.code}") from exc
        except urllib.error.URLError as exc:
            raise OSError(f"data server at {self.url}: {exc.reason}") from exc
        except ValueError as exc:
            raise OSError(f"data server at {self.url} answered no JSON") from exc
        stop = answer.get("stop") if isinstance(answer, dict) else None
        return str(stop) if stop else None

    def record(self, test_id: str) -> TestRecord | None:
        """test.json as the data server holds it, if it does."""
        try:
            with urllib.request.urlopen(f"{self.url.rstrip('/')}/api/results/{test_id}", timeout=30) as response:
                record = TestRecord.from_json(json.loads(response.read()).get("test"))
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return None
        return record if record.test_id == test_id else None

    def unstored_record(self, test_id: str) -> TestRecord | None:
        """test.json as `store` kept it on this machine when the server was away, if it did."""
        path = unstored_dir(test_id) / "test.json"
        if not path.is_file():
            return None
        return TestRecord.from_text(path.read_text())


def unstored_dir(test_id: str) -> Path:
    """Where test.json and junit.xml wait when the data server could not take them:
    $MAESTRO_UNSTORED/<test id> (default ./maestro-unstored)."""
    return resolve_test_dir(Path(os.environ.get("MAESTRO_UNSTORED", "maestro-unstored")), test_id)

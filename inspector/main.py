"""`maestro-inspector`: reads a SUT's management interface on an interval.

START_INSPECTOR names a source (`rabbitmq`, `host`; see `inspector/sources.py`) and its
management URL; several may run at once. Each writes `<source>-<data set>.csv` under
`<data dir>/<test id>/inspector/<name>/`, one row per entity per interval (default 10 s as
Maestro, down to 1 s) and once more when it stops. A sample that fails is logged and counted,
and the inspector goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from inspector.csvfile import DataSetWriter
from inspector.registry import SOURCES
from inspector.sources import Rows, Source, SourceError, redact
from protocol.codes import Activity, Role
from protocol.concurrency import wait_event
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.file_check import check_files
from protocol.json_value import JsonObject
from protocol.notes import (
    Note,
    OkResponse,
    StartInspector,
    StopInspector,
    StopTest,
    TestFailed,
)
from protocol.parsing import number
from protocol.results import InspectorSummary, write_peer_json
from protocol.runtime import Peer, PeerError, UnsupportedError

__all__ = ["Inspector", "main"]

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 1.0


@dataclass
class _Running:
    source: Source
    url: str
    directory: Path
    interval_s: float
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    writers: dict[str, DataSetWriter] = field(default_factory=dict)
    samples: int = 0
    errors: int = 0
    in_a_row: int = 0  # failed samples since the last good one
    last_error: str | None = None
    task: asyncio.Task[None] | None = None

    def write(self, rows: Rows) -> None:
        for data_set, entries in rows.items():
            writer = self.writers.get(data_set)
            if writer is None:
                writer = self.writers[data_set] = DataSetWriter(self.directory / f"{self.source.name}-{data_set}.csv")
            for entry in entries:
                writer.write(entry)

    def summary(self) -> InspectorSummary:
        return InspectorSummary(
            url=redact(self.url),
            interval_s=self.interval_s,
            samples=self.samples,
            errors=self.errors,
            last_error=self.last_error,
            files=tuple(sorted(w.path.name for w in self.writers.values())),
        )


class Inspector(Peer):
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._running: dict[str, _Running] = {}
        self._started_ns = 0

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
            case StartInspector():
                return self._start(note)
            case StopInspector() | StopTest():
                await self._stop_all()
                return OkResponse()
            case _:
                return await super().handle_role_note(note)

    def _start(self, note: StartInspector) -> OkResponse:
        factory = SOURCES.get(note.inspector)
        if factory is None:
            raise UnsupportedError(f"no inspector {note.inspector!r} (known: {', '.join(sorted(SOURCES))})")
        if note.inspector in self._running:
            raise PeerError(f"inspector {note.inspector} runs already")
        url = note.url or self.settings.management_url
        try:
            interval = number(MIN_INTERVAL_S)(note.options.get("interval_s", self.settings.inspector_interval_s))
        except ValueError as exc:
            raise PeerError(f"interval_s must be a number of seconds, at least {MIN_INTERVAL_S:g}: {exc}") from exc
        try:
            source = factory(url)
        except SourceError as exc:
            raise PeerError(str(exc)) from exc
        directory = self.test_dir()
        running = _Running(source, url, directory, interval)
        if not self._running:
            self._started_ns = time.time_ns()
        self._running[note.inspector] = running
        self.state = Activity.RUNNING
        running.task = asyncio.create_task(self._poll(running))
        log.info("inspector %s on %s every %g s", note.inspector, redact(url) or "this host", interval)
        return OkResponse()

    async def _poll(self, running: _Running) -> None:
        start = time.monotonic()
        tick = 0
        while not running.stop.is_set():
            await self._sample(running)
            tick += 1
            delay = start + tick * running.interval_s - time.monotonic()
            await wait_event(running.stop, delay)
        # A closing reading: the SUT's counters as of the test's end, after the drain, which a
        # test's accounting holds against its own (reports.accounting); the last interval's
        # reading may be up to an interval older. Not asked of a SUT that did not answer the
        # last one, which would hold the stop up by its timeouts.
        if running.samples and not running.in_a_row:
            await self._sample(running)

    async def _sample(self, running: _Running) -> None:
        try:
            rows = await asyncio.to_thread(running.source.sample)
        except SourceError as exc:
            self._failed_sample(running, str(exc))
            log.warning("%s", exc)
        except Exception as exc:  # a source bug must not end the inspection
            self._failed_sample(running, f"{type(exc).__name__}: {exc}")
            log.exception("inspector %s failed a sample", running.source.name)
        else:
            running.samples += 1
            running.in_a_row = 0
            running.write(rows)

    def _failed_sample(self, running: _Running, error: str) -> None:
        """Counted; and when the test asked for it, the test fails once enough come in a row."""
        running.errors += 1
        running.in_a_row += 1
        running.last_error = error
        limit = self.settings.fail.inspector_errors
        if limit and running.in_a_row == limit:
            reason = f"inspector {running.source.name}: {limit} failed samples in a row, the last: {error}"
            self.bus.publish(self.topics.notifications, TestFailed(test_id=self.test_id, message=reason))

    async def coordinator_lost(self) -> None:
        await self._stop_all()

    async def _stop_all(self) -> None:
        if not self._running:
            return
        for running in self._running.values():
            running.stop.set()
        await asyncio.gather(*(r.task for r in self._running.values() if r.task), return_exceptions=True)
        for running in self._running.values():
            for writer in running.writers.values():
                writer.close()
            running.source.close()
        directory = next(iter(self._running.values())).directory
        summaries = {name: r.summary() for name, r in self._running.items()}
        files = tuple(sorted(name for s in summaries.values() for name in s.files))
        record = replace(
            self.peer_record(),
            started_ns=self._started_ns,
            ended_ns=time.time_ns(),
            inspectors=summaries,
            files=files,
            checks=check_files(directory, files),
        )
        write_peer_json(directory, record)
        self._running.clear()
        self.state = Activity.IDLE

    def counters(self) -> JsonObject:
        counters = super().counters()
        counters["inspectors"] = {name: r.summary().to_json() for name, r in self._running.items()}
        return counters

    async def shutdown(self) -> None:
        await self._stop_all()
        await super().shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-inspector", "A Maestro inspector daemon: watches the SUT's management interface.")
    return run_daemon(Inspector, parser, argv, lambda _args: Role.INSPECTOR)

"""Reports asked for over HTTP are built in the background, one at a time, by a builder process
(reports/report_builder.py): Spark's JVM never runs inside a request, and a request never waits
for it. The builder keeps its Spark session for the next report until none was asked for
`idle_s`, so only the first report of a while pays for the JVM. Whoever asks meanwhile is told
where the report is: queued (behind how many), building (for how long, at which step), or
failed (and why).

A build costs a JVM and minutes of CPU, and reading the reports is open to anyone: so a reader
without the server's token starts at most one build per `anonymous_every_s` (the first report
asked for after a test still builds at once); meanwhile such a request is told the report is
`held`, and when to ask again. The token's holders (the coordinator, CI) are not held.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from reports.report_builder import BUILT, FAILED, SPARK_UP

__all__ = ["BuildState", "ReportQueue"]

log = logging.getLogger(__name__)

_BUILDER_STOP_S = 30.0  # a build under way when the server stops, and Spark's own stop
_TRY_AGAIN_AFTER_S = 30.0  # a failed report, asked for again
# Builds an anonymous reader may start: one a minute keeps one JVM from being kept busy by
# strangers, and still builds the report a person opens after a test.
_ANONYMOUS_EVERY_S = 60.0


@dataclass
class BuildState:
    state: str  # queued | building | done | failed | held (not started: asked too soon)
    ahead: int = 0  # reports before it, while queued
    started_mono: float = 0.0
    step: str = "waiting for its turn"
    error: str = ""
    ended_mono: float = 0.0
    held_until_mono: float = 0.0

    def retry_after_s(self) -> int:
        """When asking again may start a held build (2 s for every other state: a page's reload)."""
        return max(2, round(self.held_until_mono - time.monotonic())) if self.state == "held" else 2

    def tried_again(self, now_mono: float) -> bool:
        """A failed report is tried again when asked again, but not in a tight loop of refreshes:
        from 30 s after it failed. (After it started, a build that took longer than that, as
        Spark's start on a busy machine can, was queued again by the first look at its failure.)"""
        return self.state == "failed" and now_mono - self.ended_mono > _TRY_AGAIN_AFTER_S

    def as_dict(self) -> dict[str, object]:
        elapsed = round(time.monotonic() - self.started_mono, 1) if self.started_mono else 0.0
        return {"state": self.state, "ahead": self.ahead, "elapsed_s": elapsed, "step": self.step, "error": self.error}


class _Builder:
    """The builder process, and the build it is asked for."""

    def __init__(self, root: Path) -> None:
        argv = [sys.executable, "-m", "reports", "builder", str(root)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.warm = False  # its Spark session is up

    def build(self, test_id: str, state: BuildState) -> list[str] | None:
        """None once built; else the builder's last lines, which say why not."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        lines: deque[str] = deque(maxlen=20)
        state.step = "reading the files and drawing the charts" if self.warm else "starting Spark"
        try:
            self.proc.stdin.write(test_id + "\n")
            self.proc.stdin.flush()
        except OSError as exc:  # it ended since the last build
            return [f"the report builder ended: {exc}"]
        for text in self.proc.stdout:
            line = text.rstrip()
            if line == f"{BUILT} {test_id}":  # its session came up before: SPARK_UP made it warm
                return None
            if line == f"{FAILED} {test_id}":
                return list(lines)
            lines.append(line)
            if line.startswith(SPARK_UP):
                self.warm = True
                state.step = "reading the files and drawing the charts"
        return [*lines, f"the report builder ended (exit {self.proc.wait()})"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Its Spark session stopped, and the process gone."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the end of its list: it stops Spark and exits
        try:
            self.proc.wait(_BUILDER_STOP_S)
        except subprocess.TimeoutExpired:
            log.warning("the report builder did not end within %g s; killing it", _BUILDER_STOP_S)
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        """Ends it at once: the build it is reading for sees the end of its output."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


@dataclass
class ReportQueue:
    root: Path
    idle_s: float = 600.0  # the builder, its JVM's memory included, ends after this long unused
    anonymous_every_s: float = _ANONYMOUS_EVERY_S
    _anonymous_started_mono: float = float("-inf")
    _waiting: deque[str] = field(default_factory=deque)
    _states: dict[str, BuildState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _worker: threading.Thread | None = None
    _builder: _Builder | None = None
    _closing: bool = False

    def __post_init__(self) -> None:
        self._wake = threading.Condition(self._lock)

    def ask(self, test_id: str, *, trusted: bool = True) -> BuildState:
        """Queue the report of `test_id` unless it exists or is on its way; its state. An
        untrusted ask (no token) queues a build only once per `anonymous_every_s`."""
        with self._lock:
            if (self.root / test_id / "report" / "index.html").exists():
                return BuildState("done")
            state = self._states.get(test_id)
            now = time.monotonic()
            # Done without a page (removed since), or failed a while ago: once more.
            if state is None or state.state in ("done", "held") or state.tried_again(now):
                if not trusted:
                    wait_s = self._anonymous_started_mono + self.anonymous_every_s - now
                    if wait_s > 0:
                        held = BuildState("held", held_until_mono=now + wait_s)
                        if state is None or state.state == "held":
                            self._states[test_id] = held
                        return held
                    self._anonymous_started_mono = now
                state = self._states[test_id] = BuildState("queued")
                self._waiting.append(test_id)
                self._start()
            if state.state == "queued":
                state.ahead = list(self._waiting).index(test_id) + sum(
                    s.state == "building" for s in self._states.values()
                )
            return state

    @property
    def builder_pid(self) -> int | None:
        """The process id of the builder that built last, or builds now (None before any)."""
        with self._lock:
            return self._builder.proc.pid if self._builder is not None else None

    def close(self) -> None:
        """No more builds (the server is stopping): one under way is cut short, as the process
        it runs in would be, and the builder ends."""
        with self._lock:
            self._closing = True
            self._waiting.clear()
            self._wake.notify_all()
            worker, builder = self._worker, self._builder
            building = any(state.state == "building" for state in self._states.values())
        if builder is not None and building:
            builder.kill()
        if worker is not None:
            worker.join(_BUILDER_STOP_S)

    def _start(self) -> None:  # under the lock
        if self._closing:
            return
        self._wake.notify()
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="report-builder", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        # The builder is this thread's: a thread that ends for idleness closes its own, while an
        # ask meanwhile may have started the next thread with a builder of its own.
        builder: _Builder | None = None
        try:
            while (test_id := self._next()) is not None:
                builder = self._build(builder, test_id, self._states[test_id])
        finally:
            if builder is not None:
                builder.close()

    def _next(self) -> str | None:
        """The next report to build, waiting for one up to `idle_s`; None: time to end."""
        with self._lock:
            if not self._waiting and not self._closing:
                self._wake.wait(self.idle_s)
            if not self._waiting or self._closing:
                # Marked ended under the lock: an ask from now on starts a new thread, with a
                # builder of its own, rather than counting on this one.
                self._worker = None if self._worker is threading.current_thread() else self._worker
                return None
            test_id = self._waiting.popleft()
            state = self._states[test_id]
            state.state, state.started_mono, state.step = "building", time.monotonic(), "starting Spark"
            return test_id

    def _build(self, builder: _Builder | None, test_id: str, state: BuildState) -> _Builder | None:
        """Build with `builder`, or a new one; the builder for the next build (None after a failure:
        a builder ends then, so that the next build starts from a fresh JVM)."""
        log.info("building the report of %s", test_id)
        if builder is None or not builder.alive():
            builder = _Builder(self.root)
        with self._lock:
            self._builder = builder  # for close(), which kills it if its build does not end
        why = builder.build(test_id, state)
        if why is not None:
            builder.close()
        with self._lock:
            state.ended_mono = time.monotonic()
            if why is None:
                state.state, state.step = "done", "done"
            else:
                state.state, state.step = "failed", "failed"
                state.error = "\n".join(why)[-2000:]
                log.error("the report of %s failed: %s", test_id, state.error)
        return builder if why is None else None

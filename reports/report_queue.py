"""Reports asked for over HTTP are built in the background, one at a time, each by the reporter
in a process of its own: Spark's JVM never runs inside a request, and a request never waits
for it. Whoever asks meanwhile is told where the report is: queued (behind how many), building
(for how long, at which step), or failed (and why).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BuildState", "ReportQueue"]

log = logging.getLogger(__name__)


@dataclass
class BuildState:
    state: str  # queued | building | done | failed
    ahead: int = 0  # reports before it, while queued
    started_mono: float = 0.0
    step: str = "waiting for its turn"
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        elapsed = round(time.monotonic() - self.started_mono, 1) if self.started_mono else 0.0
        return {"state": self.state, "ahead": self.ahead, "elapsed_s": elapsed, "step": self.step, "error": self.error}


@dataclass
class ReportQueue:
    root: Path
    _waiting: deque[str] = field(default_factory=deque)
    _states: dict[str, BuildState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _worker: threading.Thread | None = None

    def ask(self, test_id: str) -> BuildState:
        """Queue the report of `test_id` unless it exists or is on its way; its state."""
        with self._lock:
            if (self.root / test_id / "report" / "index.html").exists():
                return BuildState("done")
            state = self._states.get(test_id)
            # Done without a page (removed since), or failed a while ago: once more.
            if state is None or state.state == "done" or self._asked_again(state):
                state = self._states[test_id] = BuildState("queued")
                self._waiting.append(test_id)
                self._start()
            if state.state == "queued":
                state.ahead = list(self._waiting).index(test_id) + sum(
                    s.state == "building" for s in self._states.values()
                )
            return state

    def _asked_again(self, state: BuildState) -> bool:
        # A failed report is tried again when asked again, but not in a tight loop of refreshes.
        return state.state == "failed" and time.monotonic() - state.started_mono > 30

    def _start(self) -> None:  # under the lock
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="report-builder", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    return
                test_id = self._waiting.popleft()
                state = self._states[test_id]
                state.state, state.started_mono, state.step = "building", time.monotonic(), "starting Spark"
            self._build(test_id, state)

    def _build(self, test_id: str, state: BuildState) -> None:
        log.info("building the report of %s", test_id)
        argv = [sys.executable, "-m", "reports", "report", str(self.root), test_id]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            lines: deque[str] = deque(maxlen=20)
            for line in proc.stdout:
                lines.append(line.rstrip())
                if "spark session up" in line:
                    state.step = "reading the files and drawing the charts"
            code = proc.wait()
        with self._lock:
            if code == 0:
                state.state, state.step = "done", "done"
            else:
                state.state, state.step = "failed", "failed"
                state.error = "\n".join(lines)[-2000:]
                log.error("the report of %s failed (exit %d): %s", test_id, code, state.error)

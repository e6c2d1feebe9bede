"""The services an agent may stop, start, restart, kill, pause and resume: its own child process
(`start` in the configuration), a pid file, a command line (`match`), or a systemd unit (`unit`:
systemctl does the work, signals go through `systemctl kill`)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agent.config import ServiceConfig
from protocol.process_table import processes_naming
from protocol.runtime import PeerError

__all__ = ["Service"]

log = logging.getLogger(__name__)

_STOP_WAIT_S = 10.0


@dataclass
class Service:
    config: ServiceConfig
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    def _systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.config.unit is not None
        argv = ["systemctl", *args, "--", self.config.unit]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0 and args[0] != "is-active":
            why = result.stderr.strip() or f"exit {result.returncode}"
            raise PeerError(f"service {self.config.name}: {' '.join(argv)} failed: {why}")
        return result

    def pid(self) -> int | None:
        if self.config.unit is not None:
            main_pid = self._systemctl("show", "--property=MainPID", "--value").stdout.strip()
            return int(main_pid) if main_pid.isdigit() and int(main_pid) > 0 else None
        if self.proc is not None:
            return self.proc.pid if self.proc.poll() is None else None
        if self.config.pidfile is not None:
            try:
                return int(self.config.pidfile.read_text().strip())
            except (OSError, ValueError):
                return None
        if self.config.match is not None:
            return _process_matching(self.config.match, self.config.name)
        return None

    def running(self) -> bool:
        if self.config.unit is not None:
            return self._systemctl("is-active", "--quiet").returncode == 0
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def start(self) -> None:
        if self.config.unit is not None:
            self._systemctl("start")
            return
        if self.running():
            raise PeerError(f"service {self.config.name} runs already")
        if not self.config.start:
            raise PeerError(f"service {self.config.name} has no start command in the agent's configuration")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.config.name}.log").open("ab") as out:
            self.proc = subprocess.Popen(list(self.config.start), stdout=out, stderr=subprocess.STDOUT)

    def send(self, sig: signal.Signals) -> int:
        if self.config.unit is not None:
            self._systemctl("kill", f"--signal={sig.name}")
            return self.pid() or 0
        pid = self.pid()
        if pid is None:
            raise PeerError(f"service {self.config.name} is not running")
        os.kill(pid, sig)
        return pid

    def stop(self, sig: signal.Signals | None = None) -> None:
        """Signal, then wait for it to go (SIGKILL after a while); blocks."""
        if self.config.unit is not None and sig is None:
            if self.paused:
                self.send(signal.SIGCONT)
                self.paused = False
            self._systemctl("stop")  # systemd's own stop: its ExecStop, its timeout, its SIGKILL
            return
        if self.paused:
            self.send(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.paused = False
        pid = self.send(sig or self.config.stop_signal)
        deadline = time.monotonic() + _STOP_WAIT_S
        while self.running() and time.monotonic() < deadline:
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(0.05)
            else:
                time.sleep(0.05)
        if self.running():
            log.warning("service %s (pid %d) ignored %s; killing it", self.config.name, pid, sig)
            os.kill(pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(5)


def _process_matching(text: str, service: str) -> int | None:
    """The one live process (not this one) whose command line contains `text`."""
    found = processes_naming(text)
    if len(found) > 1:
        raise PeerError(f"service {service}: {len(found)} processes match {text!r} ({found[:5]}); make it narrower")
    return found[0] if found else None

#!/usr/bin/env python3
"""Keeps one daemon running where systemd is not PID 1 (containers, CI): the process mode.

    maestro-supervise --pidfile RUN/NAME.pid --log LOG/NAME.log -- ARGV...

Restarts the daemon when it fails, as systemd's Restart=on-failure would: after 1 s, doubling to
30 s while it keeps failing quickly. A clean exit (0, as after HALT) ends supervision. SIGTERM
stops the daemon (SIGTERM, then SIGKILL after --stop-timeout) and removes the pid file.
Standard library only: it runs under whatever Python the node has.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

QUICK_FAILURE_S = 60.0
MAX_BACKOFF_S = 30.0


class Supervisor:
    def __init__(self, argv: list[str], log: BinaryIO, stop_timeout_s: float) -> None:
        self.argv = argv
        self.log = log
        self.stop_timeout_s = stop_timeout_s
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def say(self, text: str) -> None:
        self.log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} maestro-supervise: {text}\n".encode())

    def stop(self, _signum: int, _frame: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        backoff_s = 1.0
        while not self.stopping:
            started = time.monotonic()
            code = self.run_once()
            if code is None:
                return 1
            if self.stopping or code == 0:
                self.say(f"{self.argv[0]} exited with {code}; not restarting")
                return 0
            if time.monotonic() - started > QUICK_FAILURE_S:
                backoff_s = 1.0
            self.say(f"{self.argv[0]} failed with {code}; restarting in {backoff_s:.0f} s")
            self.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
        return 0

    def run_once(self) -> int | None:
        """The daemon's exit code, or None when it cannot be started at all."""
        self.say(f"starting {' '.join(self.argv)}")
        try:
            self.child = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self.say(f"cannot start {self.argv[0]}: {exc}")
            return None
        kill_at: float | None = None
        while True:
            try:
                return self.child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if not self.stopping:
                    continue
                if kill_at is None:
                    kill_at = time.monotonic() + self.stop_timeout_s
                elif time.monotonic() > kill_at:
                    self.say(f"{self.argv[0]} did not stop within {self.stop_timeout_s} s: killing it")
                    self.child.kill()

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(prog="maestro-supervise")
    parser.add_argument("--pidfile", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--stop-timeout", type=float, default=10.0)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("no command to supervise")
    tmp = args.pidfile.with_name(args.pidfile.name + ".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(args.pidfile)
    with args.log.open("ab", buffering=0) as log:
        supervisor = Supervisor(argv, log, args.stop_timeout)
        signal.signal(signal.SIGTERM, supervisor.stop)
        signal.signal(signal.SIGINT, supervisor.stop)
        try:
            return supervisor.run()
        finally:
            if args.pidfile.read_text().strip() == str(os.getpid()):
                args.pidfile.unlink()


if __name__ == "__main__":
    sys.exit(main())

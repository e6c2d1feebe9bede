"""Daemon processes and private brokers for the integration tests (waiting for a port and starting
tansu are the product's own, in coordinator.local)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.local import wait_for_port
from protocol.embedded_broker import free_port

BIN = Path(sys.executable).parent


@dataclass
class Daemons:
    """Daemon processes started from the installed console scripts; all killed at teardown."""

    broker_url: str
    prefix: str
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, command: str, name: str, *extra: str, broker_url: str | None = None) -> subprocess.Popen[bytes]:
        argv = [str(BIN / command), "--broker", broker_url or self.broker_url, "--name", name]
        argv += ["--topic-prefix", self.prefix, "--data-dir", str(self.log_dir / name), *extra]
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def start_every_kind(self) -> None:
        """A sender s1, a receiver r1, an inspector i1 and an agent a1."""
        self.start("maestro-worker", "s1", "--role", "sender")
        self.start("maestro-worker", "r1", "--role", "receiver")
        self.start("maestro-inspector", "i1")
        self.start("maestro-agent", "a1")

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        """SIGTERM first, so that an agent stops the services it started (a SUT broker it
        restarted is its child and would outlive a SIGKILL); SIGKILL what is still up after 5 s."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


@dataclass
class PrivateMosquitto:
    """A Mosquitto of a test's own, on a free port, that the test may stop and restart."""

    config: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.config.parent / "mosquitto.log").open("ab") as log:
            self.proc = subprocess.Popen(["mosquitto", "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port)

    def stop(self, graceful: bool = False) -> None:
        """SIGKILL; or SIGTERM with `graceful`, when Mosquitto publishes its clients' last wills."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)


def private_mosquitto(directory: Path, extra_config: str = "", port: int | None = None) -> PrivateMosquitto:
    port = port or free_port()
    config = directory / "mosquitto.conf"
    # Run as root so the broker can read the test's 0700 temp files; nodelay for honest round trips.
    config.write_text(
        f"user root\nset_tcp_nodelay true\nlistener {port} 127.0.0.1\n" + (extra_config or "allow_anonymous true\n")
    )
    os.chmod(directory, 0o755)
    return PrivateMosquitto(config, port)

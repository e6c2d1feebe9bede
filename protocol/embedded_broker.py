"""An amqtt control broker on a free loopback port, for commands run without --broker."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from protocol.concurrency import BackgroundLoop

__all__ = ["EmbeddedBroker", "free_port"]

log = logging.getLogger(__name__)


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000


def ephemeral_ports() -> range:
    """The ports the kernel hands out as the local end of outgoing connections."""
    try:
        low, high = map(int, _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def free_port(host: str = "127.0.0.1", tries: int = 100) -> int:
    """A port nothing listens on, below the ephemeral range.

    A port the kernel picked from its ephemeral range can become, while our server is down
    between a stop and a start on it, the local end of some client's connection; the server
    then cannot bind it again. Below the range only another listener can take it."""
    ephemeral = ephemeral_ports()
    candidates = range(_LOWEST_PORT, ephemeral.start)
    for _ in range(tries if len(candidates) > 0 else 0):
        port = random.choice(candidates)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        any_port: int = sock.getsockname()[1]
        return any_port


class EmbeddedBroker:
    """Start with `with EmbeddedBroker() as broker:`; `broker.url` is what peers connect to."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._loop: BackgroundLoop | None = None
        self._broker: Any = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> None:
        self._loop = BackgroundLoop("embedded-mqtt-broker")
        try:
            self._loop.run(self._start(), timeout_s)
        except Exception:
            self._loop.close()
            raise
        log.info("embedded control broker listening on %s", self.url)

    async def _start(self) -> None:
        from amqtt.broker import Broker  # noqa: PLC0415 - late: only local runs pay for it

        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}"}},
            # Loopback only, so no credentials; no $SYS chatter, no packet logging.
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }

        class _ClosingBroker(Broker):
            # amqtt 0.12 can leave a client's socket open after the session ended; the session
            # handler returns only when the client is gone, so closing here is always right.
            async def stream_connected(self, reader: Any, writer: asyncio.StreamWriter, listener_name: str) -> None:
                try:
                    await super().stream_connected(reader, writer, listener_name)
                finally:
                    writer.close()

        self._broker = _ClosingBroker(config, loop=asyncio.get_running_loop())
        await self._broker.start()

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            if self._broker is not None:
                self._loop.run(self._broker.shutdown(), 10)
        finally:
            self._loop.close()
            self._loop = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()

"""A userspace TCP fault proxy between clients and the SUT, in the model of Toxiproxy.

Clients connect to the proxy's `listen` address instead of the SUT's; every byte goes through,
and the faults in force act on it:

- latency (+ jitter): each chunk is delivered `latency_ms ± jitter_ms` after it was read, never
  before an earlier chunk of the same direction (TCP keeps order);
- bandwidth: each direction is paced to `bytes_per_s`;
- blackhole: nothing is forwarded and nothing is read, as in a network partition that TCP rides
  out: when it ends, what was held flows on (unless a side gave up on the connection meanwhile);
- reset: every open connection is closed with a TCP reset, and while the fault lasts new ones
  are reset as soon as they are accepted.

Works on any host, needs no privileges, and the kernel's lack of sch_netem does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
import time
from dataclasses import dataclass, field

from protocol.precise_timer import PreciseTimer

__all__ = ["FaultProxy", "Faults"]

log = logging.getLogger(__name__)

_CHUNK = 65536


@dataclass
class Faults:
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    bytes_per_s: float = 0.0  # 0: unlimited
    blackhole: bool = False
    reset: bool = False

    def any(self) -> bool:
        return bool(self.latency_ms or self.jitter_ms or self.bytes_per_s or self.blackhole or self.reset)


@dataclass(eq=False)  # held in a set, by identity
class _Connection:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    def __init__(self, name: str, listen: tuple[str, int], upstream: tuple[str, int], seed: int | None = None) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.faults = Faults()
        self.connections_total = 0
        self.resets = 0
        self._connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._timer: PreciseTimer | None = None  # made by start(), on its loop
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._random = random.Random(seed)

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect (the real port when `listen` asked for port 0)."""
        if self._server is None:
            return self.listen
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> None:
        self._timer = PreciseTimer(asyncio.get_running_loop())
        self._server = await asyncio.start_server(self._accept, *self.listen)
        log.info("fault proxy %s: %s:%d -> %s:%d", self.name, *self.address, *self.upstream)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            self._drop(conn, reset=False)
        if self._server is not None:
            await self._server.wait_closed()
        if self._timer is not None:
            self._timer.close()

    def set(self, faults: Faults) -> None:
        """Put these faults in force (replacing the previous ones)."""
        self.faults = faults
        if faults.blackhole:
            self._flowing.clear()
        else:
            self._flowing.set()
        if faults.reset:
            for conn in list(self._connections):
                self._drop(conn, reset=True)

    def clear(self) -> None:
        self.set(Faults())

    async def _accept(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        self.connections_total += 1
        if self.faults.reset:
            self.resets += 1
            _reset(client)
            return
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.upstream)
        except OSError as exc:
            log.warning("fault proxy %s: upstream %s:%d refused: %s", self.name, *self.upstream, exc)
            _reset(client)
            return
        for writer in (client, upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(client, upstream)
        self._connections.add(conn)
        conn.tasks = [
            asyncio.create_task(self._pipe(conn, client_reader, upstream)),
            asyncio.create_task(self._pipe(conn, upstream_reader, client)),
        ]

    async def _pipe(self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction: read, hold for the latency, pace to the bandwidth, write; in order."""
        # Bounded: a paced or held writer stops the reader, and TCP pushes back on the sender.
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(maxsize=64)
        deliver = asyncio.create_task(self._deliver(queue, writer))
        last_due = 0  # perf_counter ns
        try:
            while True:
                await self._flowing.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._flowing.wait()  # what arrives as a blackhole starts is held too
                delay_ns = int(max(0.0, self.faults.latency_ms + self._jitter_ms()) * 1e6)
                last_due = max(last_due, time.perf_counter_ns() + delay_ns)
                await queue.put((last_due, data))
            await queue.put((0, b""))
            await deliver
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            deliver.cancel()
            if all(task.done() or task is asyncio.current_task() for task in conn.tasks):
                self._drop(conn, reset=False)

    async def _deliver(self, queue: asyncio.Queue[tuple[int, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            if not data:
                return
            if due > time.perf_counter_ns():
                # asyncio.sleep would add 0-2 ms to every delay (epoll's whole milliseconds).
                assert self._timer is not None
                await self._timer.sleep_until(due)
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
            if self.faults.bytes_per_s > 0:
                await asyncio.sleep(len(data) / self.faults.bytes_per_s)

    def _jitter_ms(self) -> float:
        jitter = self.faults.jitter_ms
        return self._random.uniform(-jitter, jitter) if jitter else 0.0

    def _drop(self, conn: _Connection, reset: bool) -> None:
        if conn not in self._connections:
            return
        self._connections.discard(conn)
        if reset:
            self.resets += 1
        for task in conn.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for writer in (conn.client, conn.upstream):
            if reset:
                _reset(writer)
            else:
                writer.close()

    @property
    def open_connections(self) -> int:
        return len(self._connections)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN: SO_LINGER with a zero timeout."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()

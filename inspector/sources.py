"""What an inspector reads. A source is named (`rabbitmq`, `host`), built from a management
URL, and each `sample()` returns {data set: [rows]}; the daemon writes and times them.

Sources run in a worker thread (their clients block); a failing sample raises SourceError
with a message that never carries credentials.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Cell", "HostSource", "HttpJson", "RabbitMqSource", "Row", "Rows", "Source", "SourceError", "redact"]

# One cell of an inspector's CSV, a row of them by column, and a reading's rows by data set.
Cell = str | int | float | bool | None
Row = dict[str, Cell]
Rows = dict[str, list[Row]]


class SourceError(Exception):
    pass


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Source:
    name = ""

    def sample(self) -> Rows:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds (connections)."""


class HttpJson:
    """JSON over HTTP(S) with basic auth from the URL; errors are SourceErrors without credentials."""

    def __init__(self, label: str, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SourceError(f"{label}: {redact(url)!r} is not an http(s):// management URL")
        self.label = label
        self.timeout_s = timeout_s
        self._auth = ""
        if parts.username:
            secret = f"{parts.username}:{parts.password or ''}".encode()
            self._auth = "Basic " + base64.b64encode(secret).decode()
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))

    def request(self, path: str = "", body: Any = None, missing_ok: bool = False) -> Any:
        """The answer's JSON; with `missing_ok`, None where the server has no such page (404:
        a plugin that is off)."""
        headers = {"Authorization": self._auth} if self._auth else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, headers=headers)
        where = f"{self.label} {self.base}{path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            exc.close()
            if missing_ok and exc.code == 404:
                return None
            raise SourceError(f"{where}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise SourceError(f"{where}: {getattr(exc, 'reason', exc)}") from exc
        except ValueError as exc:
            raise SourceError(f"{where}: not JSON ({exc})") from exc


@dataclass
class _Counted:
    at_s: float  # when the count was first seen at this value: a refresh, but for first sight
    count: int
    rate: float | None = None  # per second since the refresh before it; None: not known
    first_sight: bool = False


@dataclass
class RefreshedRates:
    """A queue's rates where RabbitMQ's own read 0 while its counters moved.

    RabbitMQ refreshes its statistics every 5 s (`collect_statistics_interval`), and a queue's
    first refresh carries its counts but a rate of 0: at a 1 s interval, a test's own new queue
    read 0 msg/s for its first 5-10 s while hundreds of messages went through it. A rate RabbitMQ
    gives is taken as it is. Where it gives 0 and the counter rose from one refresh to the next,
    the rate is the rise over the time between them, held until a refresh is overdue. A rise
    from the count first seen has no known start (the messages may predate that sample: 405 a
    second after first sight, at 200 msg/s): its rate is None, an empty cell, not 0. So is
    RabbitMQ's 0 for a queue first seen with messages counted, until a refresh is overdue: a
    new queue first seen at 176 read 0 msg/s for 5 s at 200 msg/s.
    """

    refresh_s: float = 5.5  # RabbitMQ's default interval, and a sample's lateness
    _seen: dict[tuple[str, ...], _Counted] = field(default_factory=dict)

    def rate(self, key: tuple[str, ...], count: int, reported: float | None, now_s: float) -> float | None:
        seen = self._seen.get(key)
        if seen is None or count < seen.count:  # first sight, or a queue of that name made again
            self._seen[key] = seen = _Counted(now_s, count, first_sight=True)
        elif count > seen.count:
            rise = None if seen.first_sight else (count - seen.count) / max(now_s - seen.at_s, 1e-3)
            self._seen[key] = seen = _Counted(now_s, count, rise)
        if reported is not None and reported > 0:
            return reported
        if seen.first_sight:  # a 0 with messages counted may be a new queue's first refresh
            return None if reported == 0 and count > 0 and now_s - seen.at_s <= self.refresh_s else reported
        # Once a refresh is overdue and the count stood still, RabbitMQ's own word: 0, or none.
        return seen.rate if now_s - seen.at_s <= self.refresh_s else reported


@dataclass
class RabbitMqSource(Source):
    """RabbitMQ's management HTTP API (`http://user:password@host:15672`): overview, queues and
    nodes, three requests per interval; and where the stream plugin's management page is on
    (`rabbitmq_stream_management`), each stream publisher's and consumer's figures, two more
    (asked once and no more where the page is missing)."""

    url: str
    timeout_s: float = 5.0
    name = "rabbitmq"
    _streams: bool = field(default=True, init=False)  # the stream pages answered, or were not asked yet
    _rates: RefreshedRates = field(default_factory=RefreshedRates, init=False)

    def __post_init__(self) -> None:
        self._http = HttpJson("rabbitmq", self.url or "http://guest:guest@127.0.0.1:15672", self.timeout_s)

    def sample(self) -> Rows:
        overview = self._http.request("/api/overview")
        queues = self._http.request("/api/queues")
        nodes = self._http.request("/api/nodes")
        if not isinstance(overview, dict) or not isinstance(queues, list) or not isinstance(nodes, list):
            raise SourceError(f"rabbitmq {self._http.base}: unexpected answer shapes")
        now_s = time.time()
        stats = overview.get("message_stats", {})
        totals = overview.get("queue_totals", {})
        objects = overview.get("object_totals", {})
        return self._stream_rows() | {
            "overview": [
                {
                    # The SUT's version, which the results index keeps with each run (#39).
                    "version": overview.get("product_version") or overview.get("rabbitmq_version", ""),
                    "publish_rate": _rate(stats, "publish"),
                    "deliver_rate": _rate(stats, "deliver_get"),
                    "ack_rate": _rate(stats, "ack"),
                    "confirm_rate": _rate(stats, "confirm"),
                    "messages": totals.get("messages", 0),
                    "messages_ready": totals.get("messages_ready", 0),
                    "messages_unacknowledged": totals.get("messages_unacknowledged", 0),
                    "connections": objects.get("connections", 0),
                    "channels": objects.get("channels", 0),
                    "queues": objects.get("queues", 0),
                    "consumers": objects.get("consumers", 0),
                }
            ],
            "queues": [
                {
                    "vhost": q.get("vhost", ""),
                    "queue": q.get("name", ""),
                    "type": q.get("type", ""),
                    "messages": q.get("messages", 0),
                    "messages_ready": q.get("messages_ready", 0),
                    "messages_unacknowledged": q.get("messages_unacknowledged", 0),
                    "consumers": q.get("consumers", 0),
                    **self._queue_rates(q, now_s),
                    "memory": q.get("memory", 0),
                    # Totals since the queue was made, for the test's accounting (reports.accounting).
                    "published": q.get("message_stats", {}).get("publish", 0),
                    "delivered": q.get("message_stats", {}).get("deliver_get", 0),
                    "redelivered": q.get("message_stats", {}).get("redeliver", 0),
                }
                for q in queues
            ],
            "nodes": [
                {
                    "node": n.get("name", ""),
                    "mem_used": n.get("mem_used", 0),
                    "mem_limit": n.get("mem_limit", 0),
                    "mem_alarm": n.get("mem_alarm", False),
                    "fd_used": n.get("fd_used", 0),
                    "fd_total": n.get("fd_total", 0),
                    "sockets_used": n.get("sockets_used", 0),
                    "disk_free": n.get("disk_free", 0),
                    "disk_free_limit": n.get("disk_free_limit", 0),
                    "disk_free_alarm": n.get("disk_free_alarm", False),
                }
                for n in nodes
            ],
        }

    def _queue_rates(self, queue: Mapping[str, Any], now_s: float) -> dict[str, float | None]:
        stats = queue.get("message_stats", {})
        where = (str(queue.get("vhost", "")), str(queue.get("name", "")))
        return {
            f"{column}_rate": self._rates.rate(
                (*where, column), int(stats.get(counter, 0)), _rate(stats, counter), now_s
            )
            for column, counter in (("publish", "publish"), ("deliver", "deliver_get"))
        }

    def _stream_rows(self) -> Rows:
        """`stream_publishers` (published, confirmed, errored) and `stream_consumers` (consumed,
        offset, offset lag, credits), one row each per publisher and consumer, totals since it
        connected."""
        if not self._streams:
            return {}
        publishers = self._http.request("/api/stream/publishers", missing_ok=True)
        consumers = self._http.request("/api/stream/consumers", missing_ok=True)
        if publishers is None or consumers is None:
            self._streams = False
            return {}
        return {
            "stream_publishers": [
                {
                    **_stream_of(p),
                    "publisher_id": p.get("publisher_id", 0),
                    "reference": p.get("reference", ""),
                    "published": p.get("published", 0),
                    "confirmed": p.get("confirmed", 0),
                    "errored": p.get("errored", 0),
                }
                for p in publishers
            ],
            "stream_consumers": [
                {
                    **_stream_of(c),
                    "subscription_id": c.get("subscription_id", 0),
                    "consumed": c.get("consumed", 0),
                    "offset": c.get("offset", 0),
                    "offset_lag": c.get("offset_lag", 0),
                    "credits": c.get("credits", 0),
                }
                for c in consumers
            ],
        }


def _stream_of(entry: Mapping[str, Any]) -> Row:
    # RabbitMQ writes details it does not have yet as an empty list (an Erlang proplist), not {}.
    queue = entry.get("queue") or {}
    connection = entry.get("connection_details") or {}
    return {"vhost": queue.get("vhost", ""), "stream": queue.get("name", ""), "connection": connection.get("name", "")}


def _rate(stats: Mapping[str, Any], name: str) -> float | None:
    """RabbitMQ's rate of `name`; None where it has no details of it yet (a queue it has not
    refreshed since it was made: it gives counts but no rate then), not 0."""
    details = stats.get(f"{name}_details")
    return float(details.get("rate", 0.0)) if isinstance(details, dict) else None


@dataclass
class HostSource(Source):
    """The node the inspector runs on, from /proc (what seed 001 read with mpstat and dstat):
    CPU user/system %, memory, disk bytes written and network bytes since the last sample."""

    url: str = ""
    proc: str = "/proc"
    name = "host"
    _last: dict[str, float] = field(default_factory=dict)
    _last_time: float = 0.0

    def _read(self, name: str) -> str:
        with open(os.path.join(self.proc, name)) as f:
            return f.read()

    def _counters(self) -> dict[str, float]:
        cpu = self._read("stat").splitlines()[0].split()[1:]
        user, nice, system, idle, iowait, irq, softirq, steal = (float(x) for x in cpu[:8])
        written = 0.0
        for line in self._read("diskstats").splitlines():
            parts = line.split()
            # Whole disks and partitions both appear; count devices without a partition number.
            if len(parts) > 9 and not parts[2].startswith(("loop", "ram")) and not parts[2][-1].isdigit():
                written += float(parts[9]) * 512  # sectors written
        rx = tx = 0.0
        for line in self._read("net/dev").splitlines()[2:]:
            iface, _, data = line.partition(":")
            if iface.strip() == "lo":
                continue
            fields = data.split()
            rx += float(fields[0])
            tx += float(fields[8])
        return {
            "user": user + nice,
            "system": system + irq + softirq,
            "total": user + nice + system + idle + iowait + irq + softirq + steal,
            "written": written,
            "rx": rx,
            "tx": tx,
        }

    def sample(self) -> Rows:
        try:
            now, counters = time.monotonic(), self._counters()
            memory = {
                line.split(":")[0]: int(line.split()[1]) * 1024 for line in self._read("meminfo").splitlines() if line
            }
        except (OSError, ValueError, IndexError) as exc:
            raise SourceError(f"host: cannot read {self.proc}: {exc}") from exc
        last, self._last = self._last, counters
        seconds = now - self._last_time if self._last_time else 0.0
        self._last_time = now
        if not last:
            return {}  # the first sample only sets the base for the deltas
        total = max(counters["total"] - last["total"], 1e-9)
        return {
            "host": [
                {
                    "host": socket.gethostname(),
                    "cpu_user_percent": round(100 * (counters["user"] - last["user"]) / total, 2),
                    "cpu_system_percent": round(100 * (counters["system"] - last["system"]) / total, 2),
                    "memory_total": memory.get("MemTotal", 0),
                    "memory_available": memory.get("MemAvailable", 0),
                    "disk_written_bytes": int(counters["written"] - last["written"]),
                    "net_rx_bytes": int(counters["rx"] - last["rx"]),
                    "net_tx_bytes": int(counters["tx"] - last["tx"]),
                    "interval_s": round(seconds, 3),
                }
            ]
        }

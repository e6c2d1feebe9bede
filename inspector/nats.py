"""NATS through its monitoring port (`nats-server -m 8222`, or `http:` in its configuration):
`/varz` and `/jsz`, two requests per interval.

`nats` takes the monitoring URL, `http://host:8222` (`user:password@` where the port asks for
it), and writes `server` (connections, subscriptions, slow consumers, memory, CPU, messages and
bytes in and out, in total and per second since the last sample: empty on the first), `jetstream`
(streams, consumers, messages, bytes, memory and storage used, API calls and errors), `streams`
(per stream: messages, bytes, first and last sequence, consumers) and `consumers` (per consumer:
pending, waiting pull requests, awaiting acknowledgement, redelivered, delivered and acknowledged
sequence). A server without JetStream gives `server` only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inspector.sources import HttpJson, Row, Rows, Source, SourceError

__all__ = ["NatsSource"]

_COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")


@dataclass
class NatsSource(Source):
    url: str
    timeout_s: float = 5.0
    name = "nats"
    _last: dict[str, float] = field(default_factory=dict, init=False)
    _last_time: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._http = HttpJson("nats", self.url or "http://127.0.0.1:8222", self.timeout_s)

    def sample(self) -> Rows:
        varz = self._http.request("/varz")
        if not isinstance(varz, dict):
            raise SourceError(f"nats {self._http.base}/varz: unexpected answer shape")
        rows: Rows = {"server": [self._server(varz)]}
        if varz.get("jetstream", {}).get("config") is None:  # JetStream off: /jsz has nothing to say
            return rows
        jsz = self._http.request("/jsz?accounts=true&streams=true&consumers=true")
        if not isinstance(jsz, dict):
            raise SourceError(f"nats {self._http.base}/jsz: unexpected answer shape")
        return rows | _jetstream(jsz)

    def _server(self, varz: Mapping[str, Any]) -> Row:
        now = time.monotonic()
        counters = {name: float(varz.get(name, 0)) for name in _COUNTERS}
        seconds = now - self._last_time if self._last else 0.0
        rates = {
            f"{name}_per_s": round((counters[name] - self._last[name]) / seconds, 1) if seconds else None
            for name in _COUNTERS
        }
        self._last, self._last_time = counters, now
        return {
            "server": varz.get("server_name", ""),
            "version": varz.get("version", ""),
            "connections": varz.get("connections", 0),
            "subscriptions": varz.get("subscriptions", 0),
            "slow_consumers": varz.get("slow_consumers", 0),
            "mem_bytes": varz.get("mem", 0),
            "cpu_percent": varz.get("cpu", 0.0),
            **{name: int(value) for name, value in counters.items()},
            **rates,
        }


def _jetstream(jsz: Mapping[str, Any]) -> Rows:
    api = jsz.get("api", {})
    streams: list[Row] = []
    consumers: list[Row] = []
    for account in jsz.get("account_details") or ():
        for stream in account.get("stream_detail") or ():
            state = stream.get("state", {})
            streams.append(
                {
                    "account": account.get("name", ""),
                    "stream": stream.get("name", ""),
                    "messages": state.get("messages", 0),
                    "bytes": state.get("bytes", 0),
                    "first_seq": state.get("first_seq", 0),
                    "last_seq": state.get("last_seq", 0),
                    "consumers": state.get("consumer_count", 0),
                }
            )
            for consumer in stream.get("consumer_detail") or ():
                consumers.append(
                    {
                        "account": account.get("name", ""),
                        "stream": stream.get("name", ""),
                        "consumer": consumer.get("name", ""),
                        "pending": consumer.get("num_pending", 0),
                        "waiting": consumer.get("num_waiting", 0),
                        "ack_pending": consumer.get("num_ack_pending", 0),
                        "redelivered": consumer.get("num_redelivered", 0),
                        "delivered_seq": consumer.get("delivered", {}).get("stream_seq", 0),
                        "ack_floor_seq": consumer.get("ack_floor", {}).get("stream_seq", 0),
                    }
                )
    return {
        "jetstream": [
            {
                "streams": jsz.get("streams", 0),
                "consumers": jsz.get("consumers", 0),
                "messages": jsz.get("messages", 0),
                "bytes": jsz.get("bytes", 0),
                "memory_bytes": jsz.get("memory", 0),
                "storage_bytes": jsz.get("storage", 0),
                "api_total": api.get("total", 0),
                "api_errors": api.get("errors", 0),
            }
        ],
        "streams": streams,
        "consumers": consumers,
    }

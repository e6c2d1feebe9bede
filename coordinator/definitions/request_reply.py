"""A request/reply test: a closed system (seed 003), the shape of RPC over a broker.

    RequestReplyTest(request_url="amqp://sut/requests", reply_url="amqp://sut/amq.rabbitmq.reply-to",
                     clients=4, outstanding=1, think_time="10ms", service_time="5ms", duration="1m")

Senders are the requesters: each of their `clients` keeps at most `outstanding` requests
waiting, and thinks between a reply and its next request (`think_time`, fixed or "exp:10ms").
Receivers are the repliers: they consume from the request URL and answer each request to its
reply address after `service_time`. `reply_url` names that address on the same broker: its
path is the reply queue (`amq.rabbitmq.reply-to` for RabbitMQ's direct reply-to, or a name);
without it each client gets a queue of its own from the broker.

It is a fixed-rate test in every other respect (flows, fail conditions, inspectors, actions),
so the incremental, repeated and sweep executors take it; a sweep over `parallel` (the
clients) draws the throughput and response-time curves of a closed system.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from coordinator.definitions.fixed_rate import DefinitionError, FixedRateTest
from protocol.json_value import JsonObject
from protocol.options import parse_delay, parse_seconds

__all__ = ["RequestReplyTest"]


_FIXED_RATE_DEFAULT = FixedRateTest.rate  # the field's default: not given


@dataclass(frozen=True)
class RequestReplyTest(FixedRateTest):
    request_url: str = ""
    reply_url: str = ""
    clients: int = 0  # requesting clients per sender (becomes `parallel`)
    outstanding: int = 1
    think_time: str | float = 0
    service_time: str | float = 0
    request_timeout: str | float = "5s"
    repliers: int = 0  # replying workers (becomes `receivers`)

    KIND = "request-reply"

    def __post_init__(self) -> None:
        # The fixed-rate fields it stands on, from the request/reply ones. Once moved, `clients`
        # and `repliers` are cleared: a sweep's `dataclasses.replace(test, parallel=8)` then
        # changes the clients, instead of being put back by a stale `clients`.
        if self.request_url and not self.send_url:
            object.__setattr__(self, "send_url", self._with_reply_address(self.request_url))
        if self.clients:
            object.__setattr__(self, "parallel", self.clients)
            object.__setattr__(self, "clients", 0)
        if self.repliers:
            object.__setattr__(self, "receivers", self.repliers)
            object.__setattr__(self, "repliers", 0)
        # No schedule: the clients are the load. A rate given was dropped without a word (a
        # hostile pass's --rate 50 ran closed at 605 requests/s).
        if self.rate not in (0.0, _FIXED_RATE_DEFAULT):
            raise DefinitionError(
                f"rate {self.rate:g}: a request/reply test is a closed system, its clients, outstanding requests "
                "and think_time are its load; give no rate"
            )
        object.__setattr__(self, "rate", 0.0)
        if not self.send_url:
            raise DefinitionError("a request/reply test needs request_url")
        super().__post_init__()
        try:
            parse_delay(self.think_time)
            parse_delay(self.service_time)
            parse_seconds(self.request_timeout)
        except ValueError as exc:
            raise DefinitionError(str(exc)) from exc
        if self.outstanding < 1:
            raise DefinitionError("outstanding must be >= 1")

    def _with_reply_address(self, request_url: str) -> str:
        if not self.reply_url:
            return request_url
        reply, request = urlsplit(self.reply_url), urlsplit(request_url)
        if (reply.scheme, reply.hostname, reply.port) != (request.scheme, request.hostname, request.port):
            where = f"{reply.scheme}://{reply.hostname}"
            raise DefinitionError(f"reply_url {where}: the replies go through the requests' broker")
        address = reply.path[1:]  # as a SUT URL's destination: AMQP 1.0's //queue/x is /queue/x
        if not address:
            raise DefinitionError("reply_url names no reply address (its path)")
        # Only its address is taken: options there were dropped without a word, and a `%d` went
        # to the broker as a queue's name.
        if reply.query:
            raise DefinitionError(f"reply_url takes no options ({reply.query}): give them in request_url")
        if "%d" in address:
            raise DefinitionError("reply_url: one reply address for every client, without %d")
        joiner = "&" if request.query else "?"
        return f"{request_url}{joiner}reply_to={address}"

    def _request_reply_options(self) -> JsonObject:
        return {"request_reply": True, "request_timeout_s": parse_seconds(self.request_timeout)}

    def sender_options(self, flow: Any, test_id: str) -> JsonObject:
        options = super().sender_options(flow, test_id)
        options.pop("rate_per_s", None)
        return (
            options
            | self._request_reply_options()
            | {
                "outstanding": self.outstanding,
                "think_time": str(parse_delay(self.think_time)),
            }
        )

    def receiver_options(self, flow: Any, test_id: str) -> JsonObject:
        options = super().receiver_options(flow, test_id)
        return options | self._request_reply_options() | {"service_time": str(parse_delay(self.service_time))}

    def target_rate(self) -> float:
        return 0.0

    def with_load(self, rate: float, parallel: int) -> RequestReplyTest:
        """A sweep's step: `parallel` is the clients; a closed system has no rate to set."""
        return dataclasses.replace(self, clients=parallel, parallel=parallel)

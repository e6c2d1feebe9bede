"""Qpid Dispatch Router through AMQP management (seed 004 §4.4.3, §5.2.3, appendix D).

`amqp-management` takes the router's AMQP URL (`amqp://[user:password@]router:5672`, or
`amqps://`) and, each interval, sends one QUERY per entity type to `$management` over one
connection, with a dynamic reply address: the router (general), its links, its memory
allocator, its connections and its addresses. Each becomes a data set:

- `general`: name, version, mode, link routes, auto links, links, nodes, addresses,
  connections, and the delivery counters;
- `memory`: per allocator type: size, batch, thread max, total, in threads, rebalanced in and
  out, total free to heap, global free list max;
- `links`: per link: name, direction, operational status, identity, and its delivery, undelivered,
  presettled, unsettled, released, modified, accepted and rejected counts, and capacity;
- `connections` and `addresses`: what the router reports of each.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proton import Message
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from inspector.sources import Row, Rows, Source, SourceError, redact

__all__ = ["ENTITY_TYPES", "AmqpManagementSource"]

_PREFIX = "org.apache.qpid.dispatch."
# entity type -> data set, and the router's attribute names -> our columns (appendix D).
ENTITY_TYPES: dict[str, tuple[str, dict[str, str]]] = {
    _PREFIX + "router": (
        "general",
        {
            "id": "name",
            "version": "version",
            "mode": "mode",
            "linkRouteCount": "link_routes",
            "autoLinkCount": "auto_links",
            "linkCount": "links",
            "nodeCount": "nodes",
            "addrCount": "addresses",
            "connectionCount": "connections",
            "deliveriesIngress": "deliveries_ingress",
            "deliveriesEgress": "deliveries_egress",
            "presettledDeliveries": "presettled",
            "droppedPresettledDeliveries": "dropped_presettled",
            "acceptedDeliveries": "accepted",
            "rejectedDeliveries": "rejected",
            "releasedDeliveries": "released",
            "modifiedDeliveries": "modified",
        },
    ),
    _PREFIX + "allocator": (
        "memory",
        {
            "typeName": "name",
            "typeSize": "size",
            "transferBatchSize": "batch",
            "localFreeListMax": "thread_max",
            "totalAllocFromHeap": "total",
            "heldByThreads": "in_threads",
            "batchesRebalancedToThreads": "rebal_in",
            "batchesRebalancedToGlobal": "rebal_out",
            "totalFreeToHeap": "total_free_to_heap",
            "globalFreeListMax": "global_free_list_max",
        },
    ),
    _PREFIX + "router.link": (
        "links",
        {
            "linkName": "name",
            "linkDir": "link_dir",
            "linkType": "link_type",
            "owningAddr": "address",
            "operStatus": "oper_status",
            "identity": "identity",
            "deliveryCount": "delivery_count",
            "undeliveredCount": "undelivered_count",
            "presettledCount": "presettled_count",
            "unsettledCount": "unsettled_count",
            "releasedCount": "released_count",
            "modifiedCount": "modified_count",
            "acceptedCount": "accepted_count",
            "rejectedCount": "rejected_count",
            "capacity": "capacity",
        },
    ),
    _PREFIX + "connection": (
        "connections",
        {
            "identity": "identity",
            "host": "host",
            "role": "role",
            "dir": "dir",
            "container": "container",
            "isEncrypted": "encrypted",
            "isAuthenticated": "authenticated",
            "user": "user",
        },
    ),
    _PREFIX + "router.address": (
        "addresses",
        {
            "name": "name",
            "distribution": "distribution",
            "inProcess": "in_process",
            "subscriberCount": "subscribers",
            "remoteCount": "remote",
            "deliveriesIngress": "deliveries_ingress",
            "deliveriesEgress": "deliveries_egress",
            "deliveriesTransit": "deliveries_transit",
        },
    ),
}


@dataclass
class AmqpManagementSource(Source):
    url: str
    timeout_s: float = 5.0
    name = "amqp-management"
    _link: tuple[BlockingConnection, BlockingSender, BlockingReceiver, str] | None = field(default=None, init=False)
    _ids: Any = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        self.url = self.url or "amqp://127.0.0.1:5672"
        parts = urlsplit(self.url)
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
            raise SourceError(f"amqp-management: {redact(self.url)!r} is not an amqp(s):// URL")

    def _connect(self) -> tuple[BlockingConnection, BlockingSender, BlockingReceiver, str]:
        if self._link is None:
            try:
                connection = BlockingConnection(self.url, timeout=self.timeout_s)
                receiver = connection.create_receiver(None, dynamic=True)
                reply_to = receiver.remote_source.address
                sender = connection.create_sender("$management")
            except Exception as exc:  # proton raises several unrelated types (ConnectionException, Timeout, ...)
                raise SourceError(f"amqp-management {redact(self.url)}: {self._scrub(exc)}") from None
            self._link = (connection, sender, receiver, reply_to)
        return self._link

    def sample(self) -> Rows:
        try:
            return {dataset: self._query(entity, columns) for entity, (dataset, columns) in ENTITY_TYPES.items()}
        except SourceError:
            self.close()  # the next sample connects afresh
            raise

    def _query(self, entity_type: str, columns: dict[str, str]) -> list[Row]:
        _, sender, receiver, reply_to = self._connect()
        # A string: the router's Python agent (which answers for the allocator) drops numeric
        # correlation ids, so their answers would come back uncorrelated (seen on 1.19.0).
        request_id = f"maestro-{next(self._ids)}"
        request = Message(
            reply_to=reply_to,
            correlation_id=request_id,
            properties={"operation": "QUERY", "entityType": entity_type, "type": "org.amqp.management", "name": "self"},
            body={"attributeNames": list(columns)},
        )
        where = f"amqp-management {redact(self.url)} QUERY {entity_type}"
        try:
            sender.send(request, timeout=self.timeout_s)
            answer = receiver.receive(timeout=self.timeout_s)
            # Qpid Dispatch Router answers presettled: there is nothing to accept then, and
            # proton's accept() would fail on its empty queue of unsettled deliveries.
            if receiver.fetcher is not None and receiver.fetcher.unsettled:
                receiver.accept()
        except Exception as exc:  # Timeout, LinkDetached, ConnectionClosed...
            raise SourceError(f"{where}: {self._scrub(exc)}") from None
        if answer.correlation_id != request_id:
            raise SourceError(f"{where}: the answer is to another request ({answer.correlation_id!r})")
        properties: dict[str, object] = dict(answer.properties or {})
        status = properties.get("statusCode")
        if status != 200:
            description = properties.get("statusDescription", "")
            raise SourceError(f"{where}: status {status} {description}".rstrip())
        body = answer.body
        if not isinstance(body, dict) or "attributeNames" not in body or "results" not in body:
            raise SourceError(f"{where}: the answer has no attributeNames and results")
        names = list(body["attributeNames"])
        return [
            {columns[name]: _plain(value) for name, value in zip(names, row, strict=False) if name in columns}
            for row in body["results"]
        ]

    def _scrub(self, exc: Exception) -> str:
        """Proton's messages quote the URL, password and all."""
        return (str(exc) or type(exc).__name__).replace(self.url, redact(self.url))

    def close(self) -> None:
        if self._link is not None:
            with contextlib.suppress(Exception):  # closing a connection that already failed
                self._link[0].close()
            self._link = None


def _plain(value: Any) -> Any:
    """Proton's AMQP types as plain Python: the router sends counters as ulong, uint and int,
    which proton subclasses from int with a repr of their own ("ulong(42)"), and that repr is
    what a CSV file would otherwise hold."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):  # symbol, char
        return str(value)
    return value

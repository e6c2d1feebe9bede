"""An AMQP 1.0 peer, on python-qpid-proton, that answers AMQP management QUERY as Qpid Dispatch
Router does: at `$management`, with the router's entity types and attribute names (its
management schema, qdrouterd 1.x), to a dynamic reply address. No Qpid Dispatch Router can be
installed on these machines; this is what the amqp-management inspector is tested against.

What it validates: the protocol exchange (link attach with a dynamic source, the request's
application properties operation/type/entityType/name, the body's attributeNames, the answer's
statusCode/statusDescription, attributeNames and results, correlation ids). What it cannot: a
real router's values and its behaviour under load.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from protocol.embedded_broker import free_port

_PREFIX = "org.apache.qpid.dispatch."


class _Router(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.listening = threading.Event()
        self.queries: list[dict[str, Any]] = []
        self._senders: dict[str, Any] = {}
        self._acceptor: Any = None
        self._deliveries = 0

    def on_start(self, event: Any) -> None:
        self._acceptor = event.container.listen(self.url)
        self.listening.set()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link.remote_source and link.remote_source.dynamic:
            address = f"amqp:/_topo/0/Router.A/temp.{uuid.uuid4().hex[:8]}"
            link.source.address = address
            self._senders[address] = link
        elif link.is_receiver and link.remote_target:
            link.target.address = link.remote_target.address

    def on_message(self, event: Any) -> None:
        request = event.message
        props = request.properties or {}
        self.queries.append(dict(props))
        sender = self._senders.get(request.reply_to)
        if sender is None:
            return
        entity = props.get("entityType", "")
        if entity == _PREFIX + "router":
            self._deliveries += 10  # the counters move between samples, as a busy router's do
        table = self._entities().get(entity)
        if props.get("operation") != "QUERY" or props.get("type") != "org.amqp.management" or table is None:
            answer = Message(
                correlation_id=request.correlation_id,
                properties={"statusCode": 404, "statusDescription": f"Not Found: {entity}"},
                body={},
            )
        else:
            wanted = list((request.body or {}).get("attributeNames") or table[0])
            index = {name: i for i, name in enumerate(table[0])}
            results = [[row[index[name]] if name in index else None for name in wanted] for row in table[1]]
            answer = Message(
                correlation_id=request.correlation_id,
                properties={"statusCode": 200, "statusDescription": "OK"},
                body={"attributeNames": wanted, "results": results},
            )
        answer.address = request.reply_to
        sender.send(answer)

    def _entities(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        d = self._deliveries
        return {
            _PREFIX + "router": (
                _names(
                    "id version mode linkRouteCount autoLinkCount linkCount nodeCount addrCount "
                    "connectionCount deliveriesIngress deliveriesEgress presettledDeliveries "
                    "droppedPresettledDeliveries acceptedDeliveries rejectedDeliveries "
                    "releasedDeliveries modifiedDeliveries"
                ),
                [["Router.A", "1.19.0", "interior", 2, 0, 9, 1, 14, 3, d, d - 2, 0, 0, d - 2, 0, 0, 0]],
            ),
            _PREFIX + "allocator": (
                _names(
                    "typeName typeSize transferBatchSize localFreeListMax totalAllocFromHeap "
                    "heldByThreads batchesRebalancedToThreads batchesRebalancedToGlobal "
                    "totalFreeToHeap globalFreeListMax"
                ),
                [
                    ["qd_buffer_t", 536, 16, 128, 1024, 64, 3, 2, 0, 0],
                    ["qd_message_t", 160, 64, 128, 256, 0, 0, 0, 0, 0],
                ],
            ),
            _PREFIX + "router.link": (
                _names(
                    "linkName linkDir linkType owningAddr operStatus identity deliveryCount "
                    "undeliveredCount presettledCount unsettledCount releasedCount modifiedCount "
                    "acceptedCount rejectedCount capacity"
                ),
                [
                    ["maestro-sender", "in", "endpoint", "M0q1", "up", "7", d, 0, 0, 2, 0, 0, d - 2, 0, 250],
                    ["maestro-receiver", "out", "endpoint", "M0q1", "up", "8", d - 2, 1, 0, 0, 0, 0, d - 2, 0, 250],
                ],
            ),
            _PREFIX + "connection": (
                _names("identity host role dir container isEncrypted isAuthenticated user"),
                [["3", "127.0.0.1:40001", "normal", "in", "maestro-1", False, False, "anonymous"]],
            ),
            _PREFIX + "router.address": (
                _names(
                    "name distribution inProcess subscriberCount remoteCount deliveriesIngress "
                    "deliveriesEgress deliveriesTransit"
                ),
                [["M0q1", "balanced", 0, 1, 0, d, d - 2, 0]],
            ),
        }

    def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()


def _names(text: str) -> list[str]:
    return text.split()


@contextmanager
def management_peer() -> Iterator[tuple[str, _Router]]:
    """The URL of a running peer, and the peer (its `queries` are what it was asked)."""
    url = f"amqp://127.0.0.1:{free_port()}"
    router = _Router(url)
    container = Container(router)
    thread = threading.Thread(target=container.run, name="qdrouter-management", daemon=True)
    thread.start()
    try:
        assert router.listening.wait(10), "the management peer did not start"
        yield url, router
    finally:
        container.stop()
        thread.join(10)

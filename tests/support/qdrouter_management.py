"""An AMQP 1.0 peer, on python-qpid-proton, that answers AMQP management as Qpid Dispatch Router
1.19.0 does. Debian has no router; one was built by hand from its public source (1.19.0 against
Qpid Proton 0.37.0), and what it answered the inspector's queries was captured into
`qdrouter_answers.json` (see its "router" field). This peer replays those answers as the router
sends them:

- at `$management`, to a dynamic reply address of the router's form (`amqp:/_topo/0/<id>/temp.…`)
  on a link in mixed settle mode, every answer presettled: the receiver has nothing to accept;
- the attributes asked for, in the order asked, each of the AMQP type the router uses (ulong
  counters, uint, int for the allocator's), with the delivery counters moving between samples as
  a busy router's do;
- the router's status codes and descriptions for an unknown entity type (400) and operation (501);
- numeric correlation ids dropped on the allocator's answers, as the router's Python agent does:
  only a string id comes back there.

What it cannot show: a router's behaviour under load, or across a network of routers.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proton import Link, Message, int32, uint, ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container

from protocol.embedded_broker import free_port

ANSWERS: dict[str, Any] = json.loads((Path(__file__).with_name("qdrouter_answers.json")).read_text())
_TYPES: dict[str, Callable[[Any], Any]] = {"ulong": ulong, "uint": uint, "int32": int32}
# Answered by the router's Python agent, which keeps only string correlation ids.
_PYTHON_AGENT = {"org.apache.qpid.dispatch.allocator"}
_MOVING = {"deliveriesIngress", "deliveriesEgress", "acceptedDeliveries", "deliveryCount", "acceptedCount"}


class _Router(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.listening = threading.Event()
        self.queries: list[dict[str, Any]] = []
        self._senders: dict[str, Any] = {}
        self._acceptor: Any = None
        self._moved = 0  # deliveries added to the captured counters so far

    def on_start(self, event: Any) -> None:
        self._acceptor = event.container.listen(self.url)
        self.listening.set()

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link.remote_source and link.remote_source.dynamic:
            address = f"amqp:/_topo/0/Router.A/temp.{uuid.uuid4().hex[:16]}"
            link.source.address = address
            link.snd_settle_mode = Link.SND_MIXED
            self._senders[address] = link
        elif link.is_receiver and link.remote_target:
            link.target.address = link.remote_target.address

    def on_message(self, event: Any) -> None:
        request = event.message
        props = dict(request.properties or {})
        self.queries.append(props)
        sender = self._senders.get(request.reply_to)
        if sender is None:
            return
        entity = props.get("entityType", "")
        if entity == "org.apache.qpid.dispatch.router":
            self._moved += 10
        status, description, body = self._answer(props.get("operation"), entity, request.body or {})
        correlation = request.correlation_id
        if entity in _PYTHON_AGENT and not isinstance(correlation, str):
            correlation = None
        answer = Message(
            address=request.reply_to,
            correlation_id=correlation,
            properties={"statusCode": status, "statusDescription": description},
            body=body,
        )
        sender.send(answer).settle()  # presettled, as the router sends its answers

    def _answer(self, operation: Any, entity: str, request_body: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
        if operation != "QUERY":
            (error,) = [e for key, e in ANSWERS["errors"].items() if key.startswith("FROB ")]
            description = error["properties"]["statusDescription"].replace("'FROB'", repr(str(operation)))
            return 501, description, {}
        captured = ANSWERS["entities"].get(entity)
        if captured is None:
            return 400, f"No such entity type '{entity}'", {}
        names: list[str] = captured["attributeNames"]
        wanted = list(request_body.get("attributeNames") or names)
        index = {name: i for i, name in enumerate(names)}
        results = [
            [self._typed(captured, name, row[index[name]]) if name in index else None for name in wanted]
            for row in captured["results"]
        ]
        return 200, "OK", {"attributeNames": wanted, "results": results}

    def _typed(self, captured: dict[str, Any], name: str, value: Any) -> Any:
        if value is None:
            return None
        if name in _MOVING:
            value += self._moved
        wrap = _TYPES.get(captured["types"].get(name, ""))
        return wrap(value) if wrap is not None else value

    def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()


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

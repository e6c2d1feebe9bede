"""Per-node configuration variables from a topology graph (seed 004 Algorithms 2 and 3).

Listeners first, on every node, then connectors: a connector must carry the port its
neighbour listens on. A router-router link becomes one inter-router connection, made by the
link's source to the target's inter-router listener (seed 004's example had both routers dial
each other, which Qpid Dispatch accepts but which doubles every inter-router connection). A
router-broker link becomes a route-container connector and two link routes, in and out.

Routers with a router neighbour run in `interior` mode: Qpid Dispatch refuses inter-router
listeners and connectors in `standalone` mode, which appendix C's example used.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from coordinator.topology.graph import Entry, Graph, Node, is_port
from coordinator.topology.yamlfile import TopologyError, plain
from protocol.json_value import JsonObject

__all__ = ["DEFAULT_ADDRESSES", "NodeConf", "Ports", "generate"]

# The three address prefixes of seed 004 appendix C.
DEFAULT_ADDRESSES: tuple[dict[str, str], ...] = (
    {"prefix": "closest", "distribution": "closest"},
    {"prefix": "multicast", "distribution": "multicast"},
    {"prefix": "unicast", "distribution": "closest"},
)
# Sections whose entries open a port on the node.
_LISTENING = ("listener", "acceptor")


@dataclass
class Ports:
    """Ports handed out in order, skipping every port a node claims in the graph file."""

    client_base: int = 5000
    inter_router_base: int = 6000
    reserved: set[int] = field(default_factory=set)
    _next: dict[str, int] = field(default_factory=dict)

    def take(self, kind: str) -> int:
        port = self._next.get(kind, self.client_base if kind == "client" else self.inter_router_base)
        while port in self.reserved:
            port += 1
        if port > 65535:
            raise TopologyError(f"ran out of {kind} ports above {self.client_base}")
        self.reserved.add(port)
        self._next[kind] = port + 1
        return port


@dataclass
class NodeConf:
    """One node's configuration variables: its sections (listener, connector, address, router,
    broker…), each a list of entries with the keys qdrouterd or the broker's role knows."""

    machine: str
    type: str
    sections: dict[str, list[Entry]] = field(default_factory=dict)

    def section(self, name: str) -> list[Entry]:
        return self.sections.setdefault(name, [])

    def to_json(self) -> JsonObject:
        out: JsonObject = {"machine": self.machine, "type": self.type}
        for name, entries in self.sections.items():
            out[name] = [plain(entry) for entry in entries]  # YAML's own dicts and lists made plain
        return out


def generate(graph: Graph, ports: Ports | None = None) -> JsonObject:
    """{"confs": [{"machine": id, "type": ..., section: [entries]}, ...]} in graph order."""
    ports = ports or Ports()
    ports.reserved |= set(_claimed_ports(graph))
    confs: dict[str, NodeConf] = {}
    inter_router_port: dict[str, int] = {}
    client_port: dict[str, int] = {}
    dialled = {link.target for link in graph.links if _both_routers(graph, link.source, link.target)}

    for node in graph.nodes.values():  # listeners, addresses, the node's own sections
        conf = NodeConf(node.id, node.type, {name: list(entries) for name, entries in node.sections.items()})
        if node.type == "router":
            _router_section(conf, node, graph)
        else:
            conf.sections["broker"] = conf.sections.get("broker") or [{"name": node.id}]
        if node.default_connections:
            port = node.port or ports.take("client")
            client_port[node.id] = port
            if node.type == "router":
                _append(conf, "listener", _normal_listener(port))
                if node.id in dialled:
                    inter_router_port[node.id] = ports.take("inter-router")
                    _append(conf, "listener", _listener(inter_router_port[node.id], "inter-router"))
                _default_addresses(conf)
            else:
                _append(conf, "acceptor", {"name": "amqp", "host": "0.0.0.0", "port": port, "protocols": "AMQP"})
        else:
            inter_router_port.update(_own_port(node, "listener", "inter-router"))
            client_port.update(_own_port(node, "listener", "normal") or _own_port(node, "acceptor", None))
        confs[node.id] = conf

    for link in graph.links:  # connectors, now that every listener has its port
        source, target = graph.nodes[link.source], graph.nodes[link.target]
        if source.type == target.type == "router":
            _connect_routers(confs[source.id], source, target, inter_router_port)
        else:
            router, broker = (source, target) if source.type == "router" else (target, source)
            _connect_broker(confs[router.id], broker, client_port)

    result = list(confs.values())
    _check_clashes(graph, result)
    return {"confs": [conf.to_json() for conf in result]}


def _both_routers(graph: Graph, a: str, b: str) -> bool:
    return graph.nodes[a].type == graph.nodes[b].type == "router"


def _router_section(conf: NodeConf, node: Node, graph: Graph) -> None:
    interior = any(graph.nodes[n].type == "router" for n in graph.neighbours(node.id))
    given = (conf.sections.get("router") or [{}])[-1]  # qdrouterd uses the last router section
    conf.sections["router"] = [{"id": node.id, "mode": "interior" if interior else "standalone", **given}]


def _listener(port: int, role: str) -> Entry:
    return {"host": "0.0.0.0", "role": role, "port": port}


def _normal_listener(port: int) -> Entry:
    return {**_listener(port, "normal"), "authenticatePeer": "no", "saslMechanisms": "ANONYMOUS"}


def _append(conf: NodeConf, section: str, entry: Entry) -> None:
    conf.section(section).append(entry)


def _default_addresses(conf: NodeConf) -> None:
    given = {entry.get("prefix") for entry in conf.sections.get("address", [])}
    for address in DEFAULT_ADDRESSES:
        if address["prefix"] not in given:
            _append(conf, "address", dict(address))


def _own_port(node: Node, section: str, role: str | None) -> dict[str, int]:
    for entry in node.sections.get(section, []):
        if role is None or entry.get("role", "normal") == role:
            return {node.id: _port(entry["port"], node, section)}
    return {}


def _connect_routers(conf: NodeConf, source: Node, target: Node, inter_router_port: dict[str, int]) -> None:
    if target.id not in inter_router_port:
        raise TopologyError(
            f"router {target.id} has default_connections: false and no inter-router listener "
            f"for {source.id} to connect to (graph line {target.line})"
        )
    port = inter_router_port[target.id]
    _append(conf, "connector", {"name": target.id, "host": target.address, "role": "inter-router", "port": port})


def _connect_broker(conf: NodeConf, broker: Node, client_port: dict[str, int]) -> None:
    if broker.id not in client_port:
        raise TopologyError(
            f"broker {broker.id} has default_connections: false and no acceptor to connect to "
            f"(graph line {broker.line})"
        )
    _append(
        conf,
        "connector",
        {"name": broker.id, "host": broker.address, "role": "route-container", "port": client_port[broker.id]},
    )
    prefix = broker.link_route_prefix or broker.id
    for direction in ("in", "out"):
        _append(conf, "linkRoute", {"prefix": prefix, "direction": direction, "connection": broker.id})


def _claimed_ports(graph: Graph) -> Iterator[int]:
    for node in graph.nodes.values():
        if node.port is not None:
            yield node.port
        for section in _LISTENING:
            for entry in node.sections.get(section, []):
                if "port" in entry:
                    yield _port(entry["port"], node, section)


def _port(value: object, node: Node, section: str) -> int:
    port = int(value) if isinstance(value, str) and value.isdigit() else value
    if not isinstance(port, int) or not is_port(port):
        raise TopologyError(f"node {node.id} (graph line {node.line}): {section} port {value!r} is not a port number")
    return port


def _check_clashes(graph: Graph, confs: list[NodeConf]) -> None:
    """Two listeners on one address and port: one of them would fail to start."""
    owners: dict[tuple[str, int], str] = {}
    for conf in confs:
        node = graph.nodes[conf.machine]
        for section in _LISTENING:
            for entry in conf.sections.get(section, []):
                if "port" not in entry:
                    continue
                key = (node.address, _port(entry["port"], node, section))
                what = f"{node.id} {section} ({entry.get('role', entry.get('name', '-'))})"
                if key in owners:
                    raise TopologyError(f"port clash: port {key[1]} on {key[0]} is taken by {owners[key]} and {what}")
                owners[key] = what

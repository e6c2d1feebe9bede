"""The topology as a graph: NetworkX node-link metadata from YAML, or a line, circle or complete
graph over the inventory's routers and brokers (seed 004 §4.3.3, appendix C).

    directed: false
    nodes:
    - {id: router1, type: router}
    - {id: broker1, type: broker, link_route_prefix: orders}
    - id: router2
      listener: [{host: 0.0.0.0, port: 8443, role: normal, sslProfile: lab}]   # kept as given
    links:
    - {source: router2, target: router1}     # router2 connects to router1's inter-router port
    - {source: router1, target: broker1}

Keys of a node other than those in NODE_KEYS are configuration sections of that node's own
(listener, sslProfile, autoLink, log, ...): lists of mappings, copied into its configuration.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coordinator.topology.inventory import Host, Inventory
from coordinator.topology.yamlfile import TopologyError, line_of, load_yaml

__all__ = ["KINDS", "NODE_KEYS", "Entry", "Graph", "Link", "Node", "graph_from_inventory", "is_port", "read_graph"]

NodeType = Literal["router", "broker"]
# A section's entry as the graph file gives it: the keys qdrouterd (or the broker's role) knows.
Entry = dict[str, object]
NODE_TYPES: tuple[NodeType, ...] = ("router", "broker")
KINDS = ("line", "circle", "complete")
NODE_KEYS = frozenset({"id", "type", "default_connections", "link_route_prefix", "port"})
_TOP_KEYS = frozenset({"directed", "multigraph", "graph", "nodes", "links", "edges"})
# Inventory groups that make a host a node of the topology.
GROUPS: dict[str, NodeType] = {"routers": "router", "brokers": "broker"}


@dataclass
class Node:
    id: str
    type: NodeType
    host: Host
    line: int = 0  # in the graph file; 0 when the graph was built from a --type
    port: int | None = None
    link_route_prefix: str | None = None
    default_connections: bool = True
    sections: dict[str, list[Entry]] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.host.address


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    line: int = 0


@dataclass
class Graph:
    nodes: dict[str, Node]
    links: list[Link]

    def neighbours(self, node_id: str) -> list[str]:
        out = []
        for link in self.links:
            if link.source == node_id:
                out.append(link.target)
            elif link.target == node_id:
                out.append(link.source)
        return out


def _sut_hosts(inventory: Inventory) -> dict[str, tuple[Host, NodeType]]:
    hosts: dict[str, tuple[Host, NodeType]] = {}
    for group, node_type in GROUPS.items():
        for host in inventory.group(group):
            if host.name in hosts and hosts[host.name][1] != node_type:
                raise TopologyError(
                    f"{inventory.path}:{host.line}: host {host.name} is in both the routers and the brokers group"
                )
            hosts[host.name] = (host, node_type)
    if not hosts:
        raise TopologyError(f"{inventory.path}: no hosts in the routers or brokers groups: nothing to connect")
    # In the order the inventory names them: a line or a circle follows the file.
    order = list(inventory.hosts)
    return dict(sorted(hosts.items(), key=lambda item: order.index(item[0])))


def graph_from_inventory(inventory: Inventory, kind: str) -> Graph:
    if kind not in KINDS:
        raise TopologyError(f"unknown topology type {kind!r}: one of {', '.join(KINDS)}")
    hosts = _sut_hosts(inventory)
    nodes = {name: Node(name, node_type, host) for name, (host, node_type) in hosts.items()}
    names = list(nodes)
    if kind == "circle" and len(names) < 3:
        raise TopologyError(f"a circle needs at least 3 routers or brokers; the inventory has {len(names)}")
    if kind == "complete":
        pairs = list(itertools.combinations(names, 2))
    else:
        pairs = list(itertools.pairwise(names))
        if kind == "circle":
            pairs.append((names[-1], names[0]))
    # Later nodes connect to earlier ones, as seed 004's appendix C has router2 -> router1.
    graph = Graph(nodes, [Link(b, a) for a, b in pairs])
    _check_links(graph, Path(f"--type {kind}"))
    return graph


def read_graph(path: Path, inventory: Inventory) -> Graph:
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"cannot read the graph file {path}: {exc.strerror or exc}") from exc
    data = load_yaml(text, path)
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: a graph file is a mapping with nodes: and links:")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise TopologyError(f"{path}:{line_of(data, 1)}: unknown key(s) {', '.join(map(str, unknown))}")
    if data.get("multigraph"):
        raise TopologyError(f"{path}: multigraph: true is not supported (one connection per pair of nodes)")
    hosts = _sut_hosts(inventory)
    nodes: dict[str, Node] = {}
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise TopologyError(f"{path}:{line_of(data, 1)}: nodes: must be a non-empty list")
    for raw in raw_nodes:
        node = _node(raw, path, hosts, inventory)
        if node.id in nodes:
            raise TopologyError(f"{path}:{node.line}: node {node.id} is listed twice")
        nodes[node.id] = node
    missing = [name for name in hosts if name not in nodes]
    if missing:
        host = hosts[missing[0]][0]
        raise TopologyError(
            f"{inventory.path}:{host.line}: inventory host {host.name} ({hosts[host.name][1]}) "
            f"is not a node of the graph {path}"
        )
    raw_links = data.get("links", data.get("edges")) or []
    if not isinstance(raw_links, list):
        raise TopologyError(f"{path}:{line_of(raw_links, 1)}: links: must be a list")
    links = []
    for raw in raw_links:
        line = line_of(raw)
        if not isinstance(raw, dict) or "source" not in raw or "target" not in raw:
            raise TopologyError(f"{path}:{line}: a link needs a source and a target")
        source, target = str(raw["source"]), str(raw["target"])
        for end in (source, target):
            if end not in nodes:
                raise TopologyError(f"{path}:{line}: link {source} - {target} names an unknown node {end}")
        links.append(Link(source, target, line))
    graph = Graph(nodes, links)
    _check_links(graph, path)
    return graph


def _node(raw: Any, path: Path, hosts: dict[str, tuple[Host, NodeType]], inventory: Inventory) -> Node:
    line = line_of(raw)
    if not isinstance(raw, dict) or "id" not in raw:
        raise TopologyError(f"{path}:{line}: a node needs an id")
    node_id = str(raw["id"])
    if node_id not in hosts:
        raise TopologyError(
            f"{path}:{line}: node {node_id} is not in the inventory {inventory.path} (groups routers, brokers)"
        )
    host, inventory_type = hosts[node_id]
    node_type = raw.get("type", inventory_type)
    if node_type not in NODE_TYPES:
        raise TopologyError(f"{path}:{line}: node {node_id}: type must be router or broker, not {node_type!r}")
    if node_type != inventory_type:
        raise TopologyError(
            f"{path}:{line}: node {node_id} is a {node_type} here but the inventory lists it as a {inventory_type}"
        )
    port = raw.get("port")
    if port is not None and not is_port(port):
        raise TopologyError(f"{path}:{line}: node {node_id}: port must be a number from 1 to 65535, not {port!r}")
    sections: dict[str, list[Entry]] = {}
    for key, value in raw.items():
        if key in NODE_KEYS:
            continue
        entries = [value] if isinstance(value, dict) else value
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TopologyError(
                f"{path}:{line_of(value, line)}: node {node_id}: section {key} must be a list of mappings"
            )
        sections[str(key)] = entries
    return Node(
        node_id,
        node_type,
        host,
        line,
        port=port,
        link_route_prefix=raw.get("link_route_prefix"),
        default_connections=bool(raw.get("default_connections", True)),
        sections=sections,
    )


def _check_links(graph: Graph, path: Path) -> None:
    seen: dict[frozenset[str], Link] = {}
    for link in graph.links:
        where = f"{path}:{link.line}" if link.line else str(path)
        if link.source == link.target:
            raise TopologyError(f"{where}: link {link.source} - {link.target} connects a node to itself")
        pair = frozenset((link.source, link.target))
        if pair in seen:
            raise TopologyError(f"{where}: link {link.source} - {link.target} is given twice")
        seen[pair] = link
        types = {graph.nodes[link.source].type, graph.nodes[link.target].type}
        if types == {"broker"}:
            raise TopologyError(
                f"{where}: link {link.source} - {link.target} joins two brokers; "
                "only router-router and router-broker links are generated"
            )


def is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536

"""The topology generator: an inventory and a graph in, per-node router and broker variables out.

`maestro topology INVENTORY (GRAPH.yml | --type line|circle|complete) [--out FILE]`; the Ansible
role `topology` renders the variables through Jinja2 templates into qdrouterd.conf and
broker.xml on the nodes (seed 004 §4.3, §5.1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from coordinator.topology.generator import Ports, generate
from coordinator.topology.graph import KINDS, graph_from_inventory, read_graph
from coordinator.topology.inventory import read_inventory
from coordinator.topology.yamlfile import TopologyError

__all__ = ["KINDS", "Ports", "TopologyError", "build_topology", "render"]


def build_topology(inventory_path: Path, graph_path: Path | None, kind: str | None, ports: Ports) -> dict[str, Any]:
    if (graph_path is None) == (kind is None):
        raise TopologyError("give either a graph file or --type (line, circle or complete), not both")
    inventory = read_inventory(inventory_path)
    graph = read_graph(graph_path, inventory) if graph_path else graph_from_inventory(inventory, str(kind))
    return generate(graph, ports)  # its entries made plain already (NodeConf.to_json)


def render(variables: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(variables, indent=2) + "\n"
    return "---\n" + yaml.safe_dump(variables, sort_keys=False, default_flow_style=False)

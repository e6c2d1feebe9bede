"""`maestro topology`: turn an inventory and a graph into per-node router and broker variables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coordinator.topology import KINDS, Ports, TopologyError, build_topology, render
from protocol.atomic import write_text_atomically

__all__ = ["add_topology_command"]

EXIT_BAD_INPUT = 2


def add_topology_command(commands: Any) -> None:
    p = commands.add_parser(
        "topology",
        help="generate router and broker configuration variables from an inventory and a graph",
        description="Read an Ansible inventory (INI or YAML; hosts in the groups routers and brokers) and a graph "
        "(NetworkX node-link YAML: nodes with type router or broker, links between them) or a --type, and print "
        "each node's listeners, connectors, addresses and link routes as YAML. Ports are handed out so that a "
        "connector meets its neighbour's listener. The Ansible playbook ansible/topology.yml renders them into "
        "qdrouterd.conf and broker.xml. On bad input nothing is written and the exit code is 2.",
    )
    p.add_argument("inventory", type=Path, help="the Ansible inventory")
    p.add_argument("graph", type=Path, nargs="?", help="graph metadata (YAML); or give --type")
    p.add_argument(
        "--type",
        dest="kind",
        choices=KINDS,
        help="instead of a graph: connect the inventory's routers and brokers in a line, a circle or each to each "
        "(complete) (default: none, the graph file's links)",
    )
    p.add_argument("--out", type=Path, help="write here instead of standard output (JSON when it ends in .json)")
    p.add_argument("--client-port-base", type=int, default=5000, help="first client port (default: %(default)s)")
    p.add_argument(
        "--inter-router-port-base", type=int, default=6000, help="first inter-router port (default: %(default)s)"
    )
    p.set_defaults(run=cmd_topology)


def cmd_topology(args: argparse.Namespace) -> int:
    try:
        variables = build_topology(
            args.inventory, args.graph, args.kind, Ports(args.client_port_base, args.inter_router_port_base)
        )
    except TopologyError as exc:
        print(f"maestro topology: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = render(variables, as_json=bool(args.out and args.out.suffix == ".json"))
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        write_text_atomically(args.out, text)
    except OSError as exc:
        print(f"maestro topology: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.out}: {len(variables['confs'])} nodes", file=sys.stderr)
    return 0

"""The topology generator against hand-worked answers (seed 004 §5.1.3 and appendix C)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.cli.main import main
from coordinator.topology import Ports, TopologyError, build_topology

APPENDIX_INVENTORY = """\
[clients]
sender ansible_host=10.0.0.1
receiver ansible_host=10.0.0.2

[routers]
router1 ansible_host=10.0.0.3
router2 ansible_host=10.0.0.4

[brokers]
broker1 ansible_host=10.0.0.5
broker2 ansible_host=10.0.0.6

[nodes:children]
brokers
clients
routers
"""

APPENDIX_GRAPH = """\
---
directed: false
graph: {}
nodes:
- type: router
  id: router1
- type: router
  id: router2
- type: broker
  id: broker1
- type: broker
  id: broker2
links:
- source: router2
  target: router1
- source: router2
  target: broker2
- source: router1
  target: broker1
multigraph: false
"""

ADDRESSES = [
    {"prefix": "closest", "distribution": "closest"},
    {"prefix": "multicast", "distribution": "multicast"},
    {"prefix": "unicast", "distribution": "closest"},
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _routers_inventory(tmp_path: Path, count: int) -> Path:
    hosts = "\n".join(f"r{i} ansible_host=10.1.0.{i}" for i in range(1, count + 1))
    return _write(tmp_path, "inventory", f"[workers]\nw1\n\n[routers]\n{hosts}\n")


def _by_machine(variables: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {conf["machine"]: conf for conf in variables["confs"]}


def _inter_router_edges(variables: dict[str, Any]) -> set[frozenset[str]]:
    """The router pairs joined by a connector that meets an inter-router listener of the named node."""
    confs = _by_machine(variables)
    address = {name: f"10.1.0.{name[1:]}" for name in confs}
    edges = set()
    for name, conf in confs.items():
        for connector in conf.get("connector", []):
            if connector["role"] != "inter-router":
                continue
            peer = confs[connector["name"]]
            assert connector["host"] == address[peer["machine"]]
            listening = [entry["port"] for entry in peer["listener"] if entry["role"] == "inter-router"]
            assert listening == [connector["port"]], (name, connector, peer["listener"])
            edges.add(frozenset((name, peer["machine"])))
    return edges


def test_two_routers_reproduce_appendix_c(tmp_path: Path) -> None:
    variables = build_topology(_routers_inventory(tmp_path, 2), None, "line", Ports())
    normal = {"host": "0.0.0.0", "role": "normal", "authenticatePeer": "no", "saslMechanisms": "ANONYMOUS"}
    assert variables == {
        "confs": [
            {
                "machine": "r1",
                "type": "router",
                "router": [{"id": "r1", "mode": "interior"}],
                "listener": [{**normal, "port": 5000}, {"host": "0.0.0.0", "role": "inter-router", "port": 6000}],
                "address": ADDRESSES,
            },
            {
                "machine": "r2",
                "type": "router",
                "router": [{"id": "r2", "mode": "interior"}],
                "listener": [{**normal, "port": 5001}],
                "address": ADDRESSES,
                "connector": [{"name": "r1", "host": "10.1.0.1", "role": "inter-router", "port": 6000}],
            },
        ]
    }


@pytest.mark.parametrize(
    ("kind", "count", "edges"),
    [
        ("line", 4, {(1, 2), (2, 3), (3, 4)}),
        ("circle", 5, {(1, 2), (2, 3), (3, 4), (4, 5), (1, 5)}),
        ("complete", 4, set(itertools.combinations(range(1, 5), 2))),
    ],
)
def test_graph_types_connect_every_neighbour_once(
    tmp_path: Path, kind: str, count: int, edges: set[tuple[int, int]]
) -> None:
    variables = build_topology(_routers_inventory(tmp_path, count), None, kind, Ports())
    assert _inter_router_edges(variables) == {frozenset((f"r{a}", f"r{b}")) for a, b in edges}
    connectors = sum(len(conf.get("connector", [])) for conf in variables["confs"])
    assert connectors == len(edges)  # one connection per link, not one from each end
    client_ports = [entry["port"] for conf in variables["confs"] for entry in conf["listener"]]
    assert len(client_ports) == len(set(client_ports))
    assert all(conf["address"] == ADDRESSES for conf in variables["confs"])


def test_a_single_router_is_standalone_with_no_inter_router_parts(tmp_path: Path) -> None:
    (conf,) = build_topology(_routers_inventory(tmp_path, 1), None, "line", Ports())["confs"]
    assert conf["router"] == [{"id": "r1", "mode": "standalone"}]
    assert [entry["role"] for entry in conf["listener"]] == ["normal"]
    assert "connector" not in conf


def test_the_appendix_graph_with_brokers_gets_connectors_and_link_routes(tmp_path: Path) -> None:
    inventory = _write(tmp_path, "inventory", APPENDIX_INVENTORY)
    variables = build_topology(inventory, _write(tmp_path, "graph.yml", APPENDIX_GRAPH), None, Ports())
    confs = _by_machine(variables)
    assert list(confs) == ["router1", "router2", "broker1", "broker2"]
    assert "sender" not in confs  # clients need no configuration
    for router, broker, address in (("router1", "broker1", "10.0.0.5"), ("router2", "broker2", "10.0.0.6")):
        acceptor_port = confs[broker]["acceptor"][0]["port"]
        route_container = [c for c in confs[router]["connector"] if c["role"] == "route-container"]
        assert route_container == [{"name": broker, "host": address, "role": "route-container", "port": acceptor_port}]
        assert confs[router]["linkRoute"] == [
            {"prefix": broker, "direction": "in", "connection": broker},
            {"prefix": broker, "direction": "out", "connection": broker},
        ]
        assert confs[broker]["broker"] == [{"name": broker}]
        assert "linkRoute" not in confs[broker]
    inter = [c for c in confs["router2"]["connector"] if c["role"] == "inter-router"]
    assert inter == [{"name": "router1", "host": "10.0.0.3", "role": "inter-router", "port": 6000}]
    assert confs["router1"]["router"][0]["mode"] == "interior"


def test_sections_from_the_graph_file_are_kept_and_their_ports_not_reused(tmp_path: Path) -> None:
    graph = """\
nodes:
- id: r1
  sslProfile:
  - {name: lab, certFile: /etc/pki/r1.pem}
  listener:
  - {host: 0.0.0.0, port: 5000, role: normal, sslProfile: lab}
  address:
  - {prefix: unicast, distribution: balanced}
- id: r2
  port: 5001
  router:
  - {workerThreads: 8}
links:
- {source: r2, target: r1}
"""
    variables = build_topology(_routers_inventory(tmp_path, 2), _write(tmp_path, "g.yml", graph), None, Ports())
    r1, r2 = variables["confs"]
    assert r1["sslProfile"] == [{"name": "lab", "certFile": "/etc/pki/r1.pem"}]
    assert r1["listener"][0] == {"host": "0.0.0.0", "port": 5000, "role": "normal", "sslProfile": "lab"}
    assert [e["port"] for e in r1["listener"][1:]] == [5002, 6000]  # 5000 and 5001 are claimed
    assert [a["prefix"] for a in r1["address"]] == ["unicast", "closest", "multicast"]
    assert r1["address"][0]["distribution"] == "balanced"  # the user's, not the default
    assert r2["router"] == [{"id": "r2", "mode": "interior", "workerThreads": 8}]
    assert r2["listener"][0]["port"] == 5001


def test_a_yaml_inventory_reads_as_the_ini_one(tmp_path: Path) -> None:
    yaml_inventory = """\
all:
  children:
    routers:
      hosts:
        router1: {ansible_host: 10.0.0.3}
        router2: {ansible_host: 10.0.0.4}
    brokers:
      hosts:
        broker1: {ansible_host: 10.0.0.5}
        broker2: {ansible_host: 10.0.0.6}
    clients:
      hosts:
        sender: {ansible_host: 10.0.0.1}
"""
    graph = _write(tmp_path, "graph.yml", APPENDIX_GRAPH)
    from_ini = build_topology(_write(tmp_path, "hosts.ini", APPENDIX_INVENTORY), graph, None, Ports())
    from_yaml = build_topology(_write(tmp_path, "hosts.yml", yaml_inventory), graph, None, Ports())
    assert from_yaml == from_ini


def _edit(old: str, new: str) -> str:
    assert old in APPENDIX_GRAPH
    return APPENDIX_GRAPH.replace(old, new)


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        (
            "nodes:\n- {id: router1}\n- {id: router2}\n- {id: broker2}\nlinks: []\n",
            "inventory:10: inventory host broker1",
        ),
        (_edit("  target: broker1", "  target: broker9"), "graph.yml:18: link router1 - broker9 names"),
        (_edit("  id: broker2", "  id: broker2\n  - x"), "graph.yml:13:3: not valid YAML"),
        (_edit("multigraph", "- {source: router1, target: router2}\nmultigraph"), "graph.yml:20: .* is given twice"),
        (_edit("target: broker1", "target: router1"), "graph.yml:18: link router1 - router1 connects"),
        (_edit("id: broker2", "id: broker2\n  port: 5000\n- {id: router3}"), "graph.yml:14: node router3"),
        (_edit("  id: broker1", "  id: broker1\n  type: router"), "graph.yml:11: 'type' is given twice"),
        (_edit("- type: broker\n  id: broker1", "- type: router\n  id: broker1"), "is a router here"),
        (
            _edit("multigraph", "- {source: broker1, target: broker2}\nmultigraph"),
            "graph.yml:20: link broker1 - broker2 joins two brokers",
        ),
        (_edit("  id: router2", "  id: router2\n  listener: 5"), "graph.yml:7: node router2: section listener"),
        ("- just\n- a list\n", "a graph file is a mapping"),
        (APPENDIX_GRAPH + "edgez: []\n", "unknown key"),
    ],
)
def test_bad_graphs_are_refused_naming_the_node_or_line(tmp_path: Path, graph: str, message: str) -> None:
    inventory = _write(tmp_path, "inventory", APPENDIX_INVENTORY)
    with pytest.raises(TopologyError, match=message.replace("(", r"\(")) as caught:
        build_topology(inventory, _write(tmp_path, "graph.yml", graph), None, Ports())
    assert str(tmp_path) in str(caught.value) or "link" in str(caught.value)


def test_a_port_clash_names_both_owners(tmp_path: Path) -> None:
    inventory = _write(tmp_path, "inventory", "[routers]\nr1 ansible_host=10.9.0.1\nr2 ansible_host=10.9.0.1\n")
    graph = "nodes:\n- {id: r1, port: 7000}\n- {id: r2, port: 7000}\nlinks:\n- {source: r2, target: r1}\n"
    with pytest.raises(TopologyError, match=r"port 7000 on 10.9.0.1 is taken by r1 listener \(normal\) and r2"):
        build_topology(inventory, _write(tmp_path, "g.yml", graph), None, Ports())
    # On different machines the same port is fine.
    inventory.write_text("[routers]\nr1 ansible_host=10.9.0.1\nr2 ansible_host=10.9.0.2\n")
    assert build_topology(inventory, tmp_path / "g.yml", None, Ports())


def test_a_broker_to_broker_link_and_a_two_node_circle_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="a circle needs at least 3"):
        build_topology(_routers_inventory(tmp_path, 2), None, "circle", Ports())
    inventory = _write(tmp_path, "inventory", APPENDIX_INVENTORY)
    with pytest.raises(TopologyError, match="link broker2 - broker1 joins two brokers"):
        build_topology(inventory, None, "line", Ports())


def test_the_command_prints_yaml_writes_json_and_writes_nothing_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _routers_inventory(tmp_path, 3)
    assert main(["topology", str(inventory), "--type", "circle"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert [conf["machine"] for conf in printed["confs"]] == ["r1", "r2", "r3"]

    out = tmp_path / "vars.json"
    assert main(["topology", str(inventory), "--type", "circle", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == printed
    before = out.read_text()

    graph = _write(tmp_path, "bad.yml", "nodes:\n- {id: r1}\n- {id: r2}\nlinks:\n- {source: r1, target: r7}\n")
    assert main(["topology", str(inventory), str(graph), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "maestro topology:" in err and "bad.yml" in err and "r3" in err  # r3 is in the inventory only
    assert out.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yml", "inventory", "vars.json"]

    assert main(["topology", str(inventory), str(graph), "--type", "line"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["topology", str(tmp_path / "missing"), "--type", "line"]) == 2
    assert "cannot read the inventory" in capsys.readouterr().err

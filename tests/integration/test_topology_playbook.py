"""topology.yml for real against this machine: `maestro topology` on the controller, a file per node.

Qpid Dispatch and Artemis cannot be installed here, so the files are read back (qdrouterd.conf's
section format, broker.xml as XML) rather than loaded by the servers, and the services are not
restarted (topology_restart=false).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.ansible import BIN, changed, recap, run_playbook

pytestmark = [pytest.mark.ansible]


def _read_qdrouterd_conf(text: str) -> dict[str, list[dict[str, str]]]:
    """qdrouterd.conf's format: `section {` lines of `key: value` `}`; # starts a comment."""
    sections: dict[str, list[dict[str, str]]] = {}
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.endswith("{"):
            assert current is None, f"nested section: {raw}"
            current = {}
            sections.setdefault(line[:-1].strip(), []).append(current)
        elif line == "}":
            assert current is not None, "a } without a section"
            current = None
        else:
            assert current is not None, f"an attribute outside a section: {raw}"
            key, _, value = line.partition(":")
            current[key.strip()] = value.strip()
    assert current is None, "a section is not closed"
    return sections


def _as_text(conf: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    return {
        section: [{k: str(v) for k, v in entry.items()} for entry in entries]
        for section, entries in conf.items()
        if section not in ("machine", "type")
    }


def _run(tmp_path: Path, inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_playbook(tmp_path / "ansible-home", inventory, "topology.yml", *extra)


@pytest.mark.timeout(300)
def test_topology_playbook_writes_each_nodes_configuration(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"""\
[all:vars]
ansible_connection=local
ansible_python_interpreter={sys.executable}
topology_restart=false

[routers]
router1 ansible_host=10.0.0.3 topology_qdrouterd_conf={tmp_path}/router1/qdrouterd.conf
router2 ansible_host=10.0.0.4 topology_qdrouterd_conf={tmp_path}/router2/qdrouterd.conf

[brokers]
broker1 ansible_host=10.0.0.5 topology_broker_xml={tmp_path}/broker1/broker.xml
"""
    )
    graph = tmp_path / "graph.yml"
    graph.write_text(
        """\
nodes:
- {id: router1, type: router, sslProfile: [{name: lab, certFile: /etc/pki/r1.pem}]}
- {id: router2, type: router}
- {id: broker1, type: broker, link_route_prefix: orders}
links:
- {source: router2, target: router1}
- {source: router1, target: broker1}
"""
    )
    result = _run(tmp_path, inventory, "-e", f"topology_graph={graph}")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert recap(result.stdout)["router1"]["changed"] > 0

    expected = yaml.safe_load(
        subprocess.run(
            [str(BIN / "maestro"), "topology", str(inventory), str(graph)], capture_output=True, text=True, check=True
        ).stdout
    )
    confs = {conf["machine"]: conf for conf in expected["confs"]}
    for router in ("router1", "router2"):
        written = _read_qdrouterd_conf((tmp_path / router / "qdrouterd.conf").read_text())
        assert written == _as_text(confs[router])
        assert next(iter(written)) == "router"  # the router section leads
    router1 = _read_qdrouterd_conf((tmp_path / "router1" / "qdrouterd.conf").read_text())
    assert router1["sslProfile"] == [{"name": "lab", "certFile": "/etc/pki/r1.pem"}]
    assert [lr["prefix"] for lr in router1["linkRoute"]] == ["orders", "orders"]

    broker = ET.parse(tmp_path / "broker1" / "broker.xml").getroot()
    ns = {"core": "urn:activemq:core"}
    assert broker.findtext("core:core/core:name", namespaces=ns) == "broker1"
    acceptor = broker.find("core:core/core:acceptors/core:acceptor", ns)
    assert acceptor is not None
    port = confs["broker1"]["acceptor"][0]["port"]
    assert acceptor.text == f"tcp://0.0.0.0:{port}?protocols=AMQP"
    route_container = [c for c in router1["connector"] if c["role"] == "route-container"]
    assert route_container == [{"name": "broker1", "host": "10.0.0.5", "role": "route-container", "port": str(port)}]

    again = _run(tmp_path, inventory, "-e", f"topology_graph={graph}")
    assert again.returncode == 0
    assert changed(again.stdout) == {"router1": 0, "router2": 0, "broker1": 0}

    # A graph with a link to an unknown node: the generator's message, and nothing rewritten.
    before = (tmp_path / "router2" / "qdrouterd.conf").read_text()
    graph.write_text(graph.read_text().replace("target: broker1", "target: broker7"))
    bad = _run(tmp_path, inventory, "-e", f"topology_graph={graph}")
    assert bad.returncode != 0
    assert "link router1 - broker7 names an unknown node broker7" in bad.stdout
    assert (tmp_path / "router2" / "qdrouterd.conf").read_text() == before

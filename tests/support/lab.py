"""A lab of three hosts on this machine, as the Ansible role sets one up.

Network namespaces on a bridge stand in for the hosts: `lab-ctl` (the control broker and the data
server), `lab-snd` (senders) and `lab-rcv` (receivers, an inspector and an agent). The root namespace is
the fourth host: the coordinator's, and the SUT's (RabbitMQ listens on loopback only, so a TCP
forwarder puts it on the bridge). The role's own playbook tasks write each host's configuration
and systemd units (tests/support/lab/units.yml), and each unit's ExecStart runs in its host's
namespace, as systemd would run it there.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from support.ansible import ANSIBLE_DIR, BIN, ansible_env

UNITS_PLAYBOOK = Path(__file__).parent / "lab" / "units.yml"
VENV = BIN.parent


@dataclass(frozen=True)
class LabHost:
    name: str  # as the inventory names it
    netns: str
    address: str
    groups: tuple[str, ...]

    def argv(self, *argv: str) -> list[str]:
        """`argv`, run in this host's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass(frozen=True)
class Lab:
    bridge: str
    gateway: str  # the root namespace's address on the bridge: the SUT and the coordinator
    hosts: dict[str, LabHost]


@dataclass(frozen=True)
class Unit:
    """What a systemd unit the role wrote runs: its ExecStart, in its folder, with its environment."""

    name: str
    argv: list[str]
    working_directory: Path
    environment: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> Unit:
        fields: dict[str, list[str]] = {}
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                fields.setdefault(key, []).append(value)
        environment = dict(item.split("=", 1) for e in fields.get("Environment", []) for item in shlex.split(e))
        (exec_start,) = fields["ExecStart"]
        (folder,) = fields["WorkingDirectory"]
        name = path.name.removeprefix("maestro-").removesuffix(".service")
        return cls(name, shlex.split(exec_start), Path(folder), environment)


# Inventory name -> groups (the role's: control and data, workers, inspectors, agents).
_HOSTS = {"lab-ctl": ("control", "data"), "lab-snd": ("workers",), "lab-rcv": ("workers", "inspectors", "agents")}


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextmanager
def network_lab() -> Iterator[Lab]:
    """The namespaces on a bridge of their own, removed on leaving."""
    tag = f"{random.randrange(16**5):05x}"
    net = f"10.{200 + random.randrange(50)}.{random.randrange(256)}"
    bridge = f"mlb{tag}"
    hosts = {
        name: LabHost(name, f"m{name}-{tag}", f"{net}.{n}", groups)
        for n, (name, groups) in enumerate(_HOSTS.items(), start=2)
    }
    try:
        _run("ip", "link", "add", bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{net}.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        for n, host in enumerate(hosts.values()):
            outside, inside = f"mlo{tag}{n}", f"mli{tag}{n}"
            _run("ip", "netns", "add", host.netns)
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            _run("ip", "link", "set", outside, "master", bridge)
            _run("ip", "link", "set", outside, "up")
            _run("ip", "link", "set", inside, "netns", host.netns)
            _run(*host.argv("ip", "addr", "add", f"{host.address}/24", "dev", inside))
            _run(*host.argv("ip", "link", "set", inside, "up"))
            _run(*host.argv("ip", "link", "set", "lo", "up"))
        yield Lab(bridge, f"{net}.1", hosts)
    finally:
        for host in hosts.values():
            subprocess.run(["ip", "netns", "del", host.netns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)


def write_units(lab: Lab, where: Path, host_vars: dict[str, dict[str, Any]]) -> dict[str, list[Unit]]:
    """The role's configuration and units for each host, under `where`/HOST; the units by host.
    `host_vars`: the inventory's variables of each host, beside what every lab host gets."""
    inventory: dict[str, Any] = {"all": {"hosts": {}, "children": {}}}
    for host in lab.hosts.values():
        inventory["all"]["hosts"][host.name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(VENV / "bin" / "python"),
            "ansible_host": host.address,
            "maestro_prefix": str(where / host.name),
            "maestro_venv": str(VENV),
            **host_vars.get(host.name, {}),
        }
        for group in host.groups:
            inventory["all"]["children"].setdefault(group, {"hosts": {}})["hosts"][host.name] = {}
    where.mkdir(parents=True, exist_ok=True)
    (where / "lab.yml").write_text(yaml.safe_dump(inventory))
    env = ansible_env(where / "ansible-home") | {"ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles")}
    extra = json.dumps({"maestro_role_dir": str(ANSIBLE_DIR / "roles" / "maestro")})
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(where / "lab.yml"), str(UNITS_PLAYBOOK), "-e", extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {
        host: [Unit.read(path) for path in sorted((where / host / "units").glob("maestro-*.service"))]
        for host in lab.hosts
    }


def clean_environment(unit: Unit) -> dict[str, str]:
    """What systemd gives a unit: its own Environment= lines and a PATH, none of this shell's."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **unit.environment}

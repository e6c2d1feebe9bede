"""Ansible inventories, INI or YAML: the hosts, their groups and variables, with line numbers.

Only what the topology generator needs: which hosts are routers or brokers, and the address a
neighbour reaches each one at. Host ranges (`web[01:05]`) and dynamic inventories are refused
by name rather than misread.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.topology.yamlfile import TopologyError, load_yaml

__all__ = ["Host", "Inventory", "read_inventory"]


@dataclass
class Host:
    name: str
    line: int
    vars: dict[str, Any] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        """What another node connects to: `ansible_host` when given, else the name."""
        return str(self.vars.get("ansible_host", self.name))


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, Host] = field(default_factory=dict)  # in the order the file names them
    children: dict[str, list[str]] = field(default_factory=dict)

    def group(self, name: str) -> list[Host]:
        """The hosts of a group and of its child groups, in file order, each once."""
        members: set[str] = set()
        seen: set[str] = set()

        def walk(group: str) -> None:
            if group in seen:
                return
            seen.add(group)
            members.update(h.name for h in self.hosts.values() if group in h.groups)
            for child in self.children.get(group, []):
                walk(child)

        walk(name)
        return [h for h in self.hosts.values() if h.name in members]

    def _host(self, name: str, line: int) -> Host:
        if "[" in name and ":" in name:
            raise TopologyError(f"{self.path}:{line}: host ranges like {name!r} are not supported; list the hosts")
        if name not in self.hosts:
            self.hosts[name] = Host(name, line)
        return self.hosts[name]


def read_inventory(path: Path) -> Inventory:
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"cannot read the inventory {path}: {exc.strerror or exc}") from exc
    inventory = Inventory(path)
    if path.suffix in (".yml", ".yaml"):
        _read_yaml(inventory, text)
    else:
        _read_ini(inventory, text)
    if not inventory.hosts:
        raise TopologyError(f"{path}: the inventory names no hosts")
    return inventory


def _pairs(words: list[str], where: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise TopologyError(f"{where}: expected key=value, got {word!r}")
        pairs[key] = value
    return pairs


def _read_ini(inventory: Inventory, text: str) -> None:
    section, kind = "ungrouped", "hosts"
    group_vars: dict[str, dict[str, str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{inventory.path}:{number}"
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise TopologyError(f"{where}: a section header must end with ']': {line!r}")
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "children", "vars"):
                raise TopologyError(f"{where}: unknown section kind {kind!r} (hosts, children or vars)")
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise TopologyError(f"{where}: {exc}") from exc
        if kind == "children":
            inventory.children.setdefault(section, []).append(words[0])
        elif kind == "vars":
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise TopologyError(f"{where}: expected key=value, got {line!r}")
            group_vars.setdefault(section, {})[key.strip()] = value.strip().strip("'\"")
        else:
            host = inventory._host(words[0], number)
            host.vars.update(_pairs(words[1:], where))
            if section not in host.groups:
                host.groups.append(section)
    # Group variables apply where the host does not set its own (Ansible's precedence).
    for group, values in group_vars.items():
        for host in inventory.group(group):
            for key, value in values.items():
                host.vars.setdefault(key, value)


def _read_yaml(inventory: Inventory, text: str) -> None:
    data = load_yaml(text, inventory.path)
    if not isinstance(data, dict):
        raise TopologyError(f"{inventory.path}: a YAML inventory is a mapping of groups (all: hosts: ...)")

    def walk(group: str, body: Any, line: int) -> None:
        if body is None:
            return
        if not isinstance(body, dict):
            raise TopologyError(f"{inventory.path}:{line}: group {group!r} must be a mapping")
        hosts = body.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise TopologyError(f"{inventory.path}:{getattr(body, 'line', line)}: {group}.hosts must be a mapping")
        for name, values in hosts.items():
            host = inventory._host(str(name), getattr(hosts, "line", line))
            host.vars.update(dict(values or {}))
            if group not in host.groups:
                host.groups.append(group)
        children = body.get("children") or {}
        for child, child_body in children.items():
            inventory.children.setdefault(group, []).append(str(child))
            walk(str(child), child_body, getattr(children, "line", line))
        for key, value in (body.get("vars") or {}).items():
            for host in inventory.group(group):
                host.vars.setdefault(key, value)

    for group, body in data.items():
        walk(str(group), body, getattr(data, "line", 1))

"""What a run ran on: the machine's CPU, cores, kernel and whether it is a virtual machine, the
hosts of its peers, and the versions of the messaging clients. test.json keeps it as the test
starts (`testbed_record`); the results index hashes it (`testbed_fingerprint`) so that a history
compares only runs on the same testbed: a run on another machine, or after a kernel upgrade, is
another series, as Conbench and Bencher keep them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from protocol.json_value import JsonObject

__all__ = ["CLIENT_LIBRARIES", "client_libraries", "host_facts", "testbed_fingerprint", "testbed_record"]

# The distributions whose code sits between a worker and the SUT (the drivers' clients).
CLIENT_LIBRARIES = ("aio-pika", "aiormq", "python-qpid-proton", "confluent-kafka", "paho-mqtt", "rstream", "nats-py")
# What makes two machines alike for a measurement; the host's own name is listed apart.
_FINGERPRINTED = ("cpu_model", "cores", "kernel", "virtual")


def host_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> JsonObject:
    """This machine: its name, CPU model, logical cores, kernel release and whether it is a
    virtual machine (the CPU's `hypervisor` flag; None where there is no /proc/cpuinfo)."""
    model, virtual = platform.processor() or platform.machine(), None
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and value.strip():
            model = value.strip()
        elif key == "flags":
            virtual = "hypervisor" in value.split()
    if text and virtual is None:
        virtual = False  # a CPU that lists no flags (ARM) says nothing of a hypervisor: assume none
    return {
        "host": socket.gethostname(),
        "cpu_model": model,
        "cores": os.cpu_count() or 0,
        "kernel": platform.release(),
        "virtual": virtual,
    }


def client_libraries() -> dict[str, str]:
    """The installed versions of the messaging clients (those installed only)."""
    found = {}
    for name in CLIENT_LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def testbed_record(peer_hosts: Iterable[str]) -> JsonObject:
    """test.json's `testbed`: the coordinator's machine, the hosts its peers said they run on,
    and the clients installed with the coordinator (the workers on this machine run these; on
    other hosts, the lab's installation keeps them alike)."""
    return {
        "coordinator": host_facts(),
        "hosts": sorted({h for h in peer_hosts if h}),
        "client_libraries": client_libraries(),
    }


def testbed_fingerprint(testbed: Mapping[str, Any] | None) -> str:
    """A short hash of what makes runs comparable: the coordinator's machine (not its name) and
    the set of the peers' hosts. "" when the run recorded no testbed (before it was recorded):
    such runs are alike to each other only."""
    if not testbed:
        return ""
    machine = testbed.get("coordinator") or {}
    key = {name: machine.get(name) for name in _FINGERPRINTED} | {"hosts": sorted(testbed.get("hosts") or [])}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

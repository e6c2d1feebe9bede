"""What an agent's actions act on, one kind per class: services (processes), fault proxies and
networks. Each names its actions and the parameters each takes; applying one returns the change
it left standing and how to undo it, so that the agent can restore everything at the end.

    USER_COMMAND stop broker duration_s=10
    USER_COMMAND latency sut-proxy ms=20 jitter_ms=2 duration_s=30
    USER_COMMAND drop sut-net probability=0.01
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import shlex
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.config import NetworkConfig
from agent.proxy import FaultProxy
from agent.services import Service
from protocol.concurrency import run_blocking
from protocol.parsing import number
from protocol.runtime import PeerError

__all__ = ["Change", "NetworkTarget", "ProxyTarget", "ServiceTarget", "Target", "parse_params"]

log = logging.getLogger(__name__)

Undo = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Change:
    """What an action left changed (`key`), and what puts it back. `undo` None: this action put
    `key` back itself (start after stop), so nothing is left to restore."""

    key: str
    restore: str
    undo: Undo | None


class Target(Protocol):
    name: str
    kind: str
    actions: Mapping[str, frozenset[str]]  # action -> the parameters it takes

    def check(self, action: str, params: dict[str, str]) -> None:
        """Refuse bad values before the agent answers OK (PeerError names the value)."""

    async def apply(self, action: str, params: dict[str, str]) -> Change | None: ...


def parse_params(action: str, target: Target, args: list[str]) -> tuple[dict[str, str], float]:
    """`key=value` arguments, checked against what the action takes; and `duration_s`."""
    allowed = target.actions[action]
    params: dict[str, str] = {}
    duration_s = 0.0
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise PeerError(f"{action} {target.name}: expected key=value, got {arg!r}")
        if key == "duration_s":
            duration_s = _number(action, key, value, minimum=0.0)
        elif key in allowed:
            params[key] = value
        else:
            takes = ", ".join(sorted(allowed | {"duration_s"}))
            raise PeerError(f"{action} {target.name}: unknown argument {key!r} (takes {takes})")
    return params, duration_s


def _number(action: str, key: str, value: str, minimum: float = 0.0, maximum: float | None = None) -> float:
    try:
        return float(number(minimum, maximum)(value))
    except ValueError as exc:
        # "delay_ms='x': expected a number, got 'x'"; "probability=2 is out of range (0 to 1)"
        why = f"{value!r}: {exc}" if str(exc).startswith("expected") else str(exc)
        raise PeerError(f"{action}: {key}={why}") from exc


def _latency(action: str, params: dict[str, str]) -> tuple[float, float]:
    ms = _number(action, "ms", params.get("ms", "0"), 0.0, 600_000.0)
    return ms, _number(action, "jitter_ms", params.get("jitter_ms", "0"), 0.0, ms)


def _bytes_per_s(action: str, target: str, params: dict[str, str], minimum: float) -> float:
    if "bytes_per_s" not in params:
        raise PeerError(f"{action} {target}: give bytes_per_s")
    return _number(action, "bytes_per_s", params["bytes_per_s"], minimum)


# --- services -------------------------------------------------------------------------------------


class ServiceTarget:
    kind = "service"
    actions: Mapping[str, frozenset[str]] = dict.fromkeys(
        ("stop", "start", "restart", "kill", "pause", "resume"), frozenset()
    )

    def __init__(self, service: Service) -> None:
        self.service = service
        self.name = service.config.name

    def check(self, action: str, params: dict[str, str]) -> None:
        pass  # the actions take no parameters

    async def apply(self, action: str, params: dict[str, str]) -> Change | None:
        await run_blocking(self._apply, action)
        match action:
            case "stop" | "kill":
                return Change(self.name, "start", lambda: run_blocking(self._apply, "start"))
            case "pause":
                return Change(self.name, "resume", lambda: run_blocking(self._apply, "resume"))
            case "start" | "resume":
                return Change(self.name, action, None)
        return None

    def _apply(self, action: str) -> None:
        service = self.service
        match action:
            case "start":
                service.start()
            case "stop" | "kill":
                service.stop(signal.SIGKILL if action == "kill" else None)
            case "restart":
                if service.running():
                    service.stop()
                service.start()
            case "pause":
                service.send(signal.SIGSTOP)
                service.paused = True
            case "resume":
                service.send(signal.SIGCONT)
                service.paused = False


# --- fault proxies --------------------------------------------------------------------------------


class ProxyTarget:
    kind = "proxy"
    actions: Mapping[str, frozenset[str]] = {
        "latency": frozenset({"ms", "jitter_ms"}),
        "bandwidth": frozenset({"bytes_per_s"}),
        "blackhole": frozenset(),
        "reset": frozenset(),
        "heal": frozenset(),
    }

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.name = proxy.name

    def check(self, action: str, params: dict[str, str]) -> None:
        if action == "latency":
            _latency(action, params)
        elif action == "bandwidth":
            _bytes_per_s(action, self.name, params, 1.0)

    async def apply(self, action: str, params: dict[str, str]) -> Change | None:
        self.check(action, params)
        if action == "heal":
            self.proxy.clear()
            return Change(self.name, "heal", None)
        if action == "latency":
            ms, jitter = _latency(action, params)
            fields: dict[str, Any] = {"latency_ms": ms, "jitter_ms": jitter}
        elif action == "bandwidth":
            fields = {"bytes_per_s": _bytes_per_s(action, self.name, params, 1.0)}
        else:
            fields = {action: True}  # blackhole, reset
        self.proxy.set(dataclasses.replace(self.proxy.faults, **fields))

        async def undo() -> None:
            # Only this fault: a latency window ending leaves a blackhole in force.
            cleared = {name: type(value)() for name, value in fields.items()}
            self.proxy.set(dataclasses.replace(self.proxy.faults, **cleared))

        return Change(f"{self.name} {action}", f"clear {action}", undo)


# --- networks: tc and iptables on an interface, in a namespace or not -----------------------------


class NetworkTarget:
    kind = "network"
    actions: Mapping[str, frozenset[str]] = {
        "latency": frozenset({"ms", "jitter_ms"}),  # tc netem, where the kernel has it
        "bandwidth": frozenset({"bytes_per_s"}),  # tc tbf
        "drop": frozenset({"probability", "direction"}),  # iptables statistic
        "partition": frozenset({"peer", "direction"}),  # iptables DROP
        "heal": frozenset(),
    }

    def __init__(self, config: NetworkConfig, state_dir: Path | None = None) -> None:
        self.config = config
        self.name = config.name
        self._rules: dict[str, list[list[str]]] = {}  # action -> the iptables rules it added
        self._qdisc: str | None = None  # the action whose root qdisc is in place
        # A qdisc carries no comment to find it by: a file says one of ours is in place, so that
        # an agent that crashed before restoring is cleaned up after by the next one.
        self._marker = state_dir / f"{config.name}.qdisc" if state_dir is not None else None

    def check(self, action: str, params: dict[str, str]) -> None:
        if action == "latency":
            _latency(action, params)
        elif action == "bandwidth":
            _bytes_per_s(action, self.name, params, 125.0)
        elif action == "drop":
            _number(action, "probability", params.get("probability", ""), 0.0, 1.0)
            self._directions(params)
        elif action == "partition":
            self._partition_rules(params)

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        prefix = ["ip", "netns", "exec", self.config.namespace] if self.config.namespace else []
        result = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise PeerError(f"{self.name}: {' '.join(argv)} failed: {result.stderr.strip() or result.returncode}")
        return result

    async def apply(self, action: str, params: dict[str, str]) -> Change | None:
        self.check(action, params)
        if action == "heal":
            await run_blocking(self.heal)
            return Change(self.name, "heal", None)
        if action in ("latency", "bandwidth"):
            await run_blocking(self._qdisc_add, action, params)
            return Change(f"{self.name} {action}", f"clear {action}", lambda: run_blocking(self._qdisc_del))
        if action in self._rules:
            raise PeerError(f"{action} {self.name}: already in force; heal it first")
        rules = self._drop_rules(params) if action == "drop" else self._partition_rules(params)
        await run_blocking(self._insert, action, rules)
        return Change(f"{self.name} {action}", f"clear {action}", lambda: run_blocking(self._delete, action))

    def heal(self) -> None:
        for action in list(self._rules):
            self._delete(action)
        if self._qdisc is not None:
            self._qdisc_del()

    # tc: one root qdisc on the interface at a time.
    def _qdisc_add(self, action: str, params: dict[str, str]) -> None:
        if self._qdisc is not None:
            raise PeerError(f"{action} {self.name}: a {self._qdisc} fault is in force on {self.config.interface}")
        dev = ["dev", self.config.interface]
        if action == "bandwidth":
            rate = int(_bytes_per_s(action, self.name, params, 125.0))
            burst = max(rate // 10, 1600)  # 100 ms worth, at least a packet
            argv = ["tc", "qdisc", "add", *dev, "root", "tbf", "rate", f"{rate * 8}bit", "burst", str(burst)]
            self._run([*argv, "latency", "100ms"])
        else:
            ms, jitter = _latency(action, params)
            argv = ["tc", "qdisc", "add", *dev, "root", "netem", "delay", f"{ms:g}ms"]
            try:
                self._run(argv + ([f"{jitter:g}ms"] if jitter else []))
            except PeerError as exc:
                if "unknown" in str(exc).lower() or "no such file" in str(exc).lower():
                    raise PeerError(
                        f"latency {self.name}: this kernel has no netem (sch_netem); put a fault proxy "
                        f"([proxies] in the agent's configuration) in the path to add delay"
                    ) from exc
                raise
        self._qdisc = action
        if self._marker is not None:
            self._marker.parent.mkdir(parents=True, exist_ok=True)
            self._marker.write_text(f"{action} {self.config.namespace or ''} {self.config.interface}\n")

    def _qdisc_del(self) -> None:
        if self._qdisc is not None:
            self._run(["tc", "qdisc", "del", "dev", self.config.interface, "root"])
            self._qdisc = None
            if self._marker is not None:
                self._marker.unlink(missing_ok=True)

    # iptables: each rule carries a comment, so that a later agent can find what an earlier one left.
    def _directions(self, params: dict[str, str]) -> list[tuple[str, str, str]]:
        direction = params.get("direction", "both")
        chains = {"in": [("INPUT", "-i", "-s")], "out": [("OUTPUT", "-o", "-d")]}
        if direction not in ("in", "out", "both"):
            raise PeerError(f"{self.name}: direction must be in, out or both, not {direction!r}")
        return chains["in"] + chains["out"] if direction == "both" else chains[direction]

    def _tag(self) -> list[str]:
        return ["-m", "comment", "--comment", f"maestro-agent:{self.name}"]

    def _drop_rules(self, params: dict[str, str]) -> list[list[str]]:
        probability = _number("drop", "probability", params.get("probability", ""), 0.0, 1.0)
        statistic = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:g}"]
        return [
            [chain, iface, self.config.interface, *statistic, *self._tag(), "-j", "DROP"]
            for chain, iface, _ in self._directions(params)
        ]

    def _partition_rules(self, params: dict[str, str]) -> list[list[str]]:
        peer: list[str] = []
        rules = []
        for chain, iface, addr in self._directions(params):
            if "peer" in params:
                try:
                    peer = [addr, str(ipaddress.ip_network(params["peer"], strict=False))]
                except ValueError as exc:
                    raise PeerError(f"partition {self.name}: peer {params['peer']!r} is not an address") from exc
            rules.append([chain, iface, self.config.interface, *peer, *self._tag(), "-j", "DROP"])
        return rules

    def _insert(self, action: str, rules: list[list[str]]) -> None:
        added: list[list[str]] = []
        try:
            for rule in rules:
                self._run(["iptables", "-I", *rule])
                added.append(rule)
        finally:
            if added:
                self._rules[action] = added

    def _delete(self, action: str) -> None:
        for rule in self._rules.pop(action, []):
            self._run(["iptables", "-D", *rule])

    def sweep(self) -> int:
        """Remove rules an earlier agent of this name left behind (it crashed before restoring)."""
        listed = self._run(["iptables", "-S"]).stdout.splitlines()
        tag = f"maestro-agent:{self.name}"
        stale = [shlex.split(line)[1:] for line in listed if line.startswith("-A ") and tag in line]
        for rule in stale:
            self._run(["iptables", "-D", *rule])
        if self._marker is not None and self._marker.exists():
            with contextlib.suppress(PeerError):  # gone with a namespace or a reboot meanwhile
                self._run(["tc", "qdisc", "del", "dev", self.config.interface, "root"])
                stale.append(["qdisc"])
            self._marker.unlink()
        return len(stale)

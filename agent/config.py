"""The agent's configuration file: what it may touch, and nothing else.

    # agent.toml
    [handlers]
    directories = ["/opt/maestro/handlers"]   # executables USER_COMMAND may run, by file name
    sources = ["https://git.lab/perf/", "/srv/handlers"]  # what AGENT_SOURCE may fetch
    timeout_s = 60

    [services.broker]                         # a target of the built-in actions
    start = ["mosquitto", "-p", "1884"]       # argv, never a shell line
    stop_signal = "TERM"                      # how `stop` ends it (default TERM)
    pidfile = "/run/mosquitto.pid"            # or: the agent's own child, started by `start`
    # match = "rabbitmq-server"               # or: the one process whose command line has this
    # unit = "qdrouterd.service"              # or: a systemd unit (systemctl stop/start/kill)
    autostart = false                         # start it when the agent starts

    [proxies.sut-proxy]                       # a fault proxy: clients connect to listen
    listen = "127.0.0.1:15672"
    upstream = "127.0.0.1:5672"

    [networks.sut-net]                        # tc and iptables act on this interface
    interface = "veth-sut"
    namespace = "sut"                         # optional: inside this network namespace

A note can only name a handler in one of the directories and a service, proxy or network
listed here; its arguments travel as an argv list.
"""

from __future__ import annotations

import re
import signal
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AgentConfig", "ConfigError", "NetworkConfig", "ProxyConfig", "ServiceConfig", "load_config"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}")  # what Linux takes as an interface or netns name


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ServiceConfig:
    name: str
    start: tuple[str, ...] = ()
    stop_signal: signal.Signals = signal.SIGTERM
    pidfile: Path | None = None
    match: str | None = None  # or: the one process whose command line contains this
    unit: str | None = None  # or: a systemd unit, driven with systemctl
    autostart: bool = False


@dataclass(frozen=True)
class ProxyConfig:
    name: str
    listen: tuple[str, int]
    upstream: tuple[str, int]


@dataclass(frozen=True)
class NetworkConfig:
    name: str
    interface: str
    namespace: str | None = None


@dataclass(frozen=True)
class AgentConfig:
    handler_dirs: tuple[Path, ...] = ()
    handler_timeout_s: float = 60.0
    handler_sources: tuple[str, ...] = ()  # URL prefixes and directories AGENT_SOURCE may fetch
    services: dict[str, ServiceConfig] = field(default_factory=dict)
    proxies: dict[str, ProxyConfig] = field(default_factory=dict)
    networks: dict[str, NetworkConfig] = field(default_factory=dict)

    def target_names(self) -> list[str]:
        return [*self.services, *self.proxies, *self.networks]


def _argv(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of strings (an argv, not a shell line)")
    return tuple(value)


def load_config(path: Path | None) -> AgentConfig:
    """No file: an agent that may run nothing (every action is refused, by name)."""
    if path is None:
        return AgentConfig()
    try:
        table = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    handlers = table.get("handlers", {})
    services = {}
    for name, entry in table.get("services", {}).items():
        where = f"{path}: [services.{name}]"
        unknown = set(entry) - {"start", "stop_signal", "pidfile", "match", "unit", "autostart"}
        if unknown:
            raise ConfigError(f"{where}: unknown key {', '.join(sorted(unknown))}")
        try:
            stop_signal = signal.Signals[f"SIG{entry.get('stop_signal', 'TERM').upper()}"]
        except KeyError as exc:
            raise ConfigError(f"{where}: unknown stop_signal {entry.get('stop_signal')!r}") from exc
        services[name] = ServiceConfig(
            name=name,
            start=_argv(entry["start"], f"{where} start") if "start" in entry else (),
            stop_signal=stop_signal,
            pidfile=Path(entry["pidfile"]) if "pidfile" in entry else None,
            match=str(entry["match"]) if entry.get("match") else None,
            unit=_unit(entry["unit"], where) if "unit" in entry else None,
            autostart=bool(entry.get("autostart", False)),
        )
        service = services[name]
        if not service.start and service.pidfile is None and service.match is None and service.unit is None:
            raise ConfigError(f"{where}: needs start (an argv), pidfile, match (a command line) or unit (systemd)")
    config = AgentConfig(
        handler_dirs=tuple(Path(d).resolve() for d in handlers.get("directories", [])),
        handler_timeout_s=float(handlers.get("timeout_s", 60.0)),
        handler_sources=_sources(handlers.get("sources", []), path),
        services=services,
        proxies=_proxies(table.get("proxies", {}), path),
        networks=_networks(table.get("networks", {}), path),
    )
    names = config.target_names()
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(f"{path}: {', '.join(clash)} names more than one service, proxy or network")
    sections = sorted(set(table) - {"handlers", "services", "proxies", "networks"})
    if sections:
        raise ConfigError(f"{path}: unknown section {', '.join(sections)}")
    return config


def _unit(value: Any, where: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9@_.:\\-]+", value) or value.startswith("-"):
        raise ConfigError(f"{where}: unit {value!r} is not a systemd unit name")
    return value


def _sources(value: Any, path: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: [handlers] sources must be a list of URL prefixes and directories")
    return tuple(value)


def _address(value: Any, where: str) -> tuple[str, int]:
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{where}: expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


def _proxies(table: Mapping[str, Any], path: Path) -> dict[str, ProxyConfig]:
    proxies = {}
    for name, entry in table.items():
        where = f"{path}: [proxies.{name}]"
        if set(entry) != {"listen", "upstream"}:
            raise ConfigError(f"{where}: needs listen and upstream (host:port), and nothing else")
        proxies[name] = ProxyConfig(
            name, _address(entry["listen"], f"{where} listen"), _address(entry["upstream"], f"{where} upstream")
        )
    return proxies


def _networks(table: Mapping[str, Any], path: Path) -> dict[str, NetworkConfig]:
    networks = {}
    for name, entry in table.items():
        where = f"{path}: [networks.{name}]"
        unknown = set(entry) - {"interface", "namespace"}
        if unknown or "interface" not in entry:
            raise ConfigError(f"{where}: needs interface (and optionally namespace), and nothing else")
        for key in ("interface", "namespace"):
            if key in entry and not _NAME.fullmatch(str(entry[key])):
                raise ConfigError(f"{where}: {key} {entry[key]!r} is not an interface or namespace name")
        networks[name] = NetworkConfig(name, str(entry["interface"]), entry.get("namespace"))
    return networks

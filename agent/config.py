"""The agent's configuration file: what it may touch, and nothing else.

    # agent.toml
    [handlers]
    directories = ["/opt/maestro/handlers"]   # executables USER_COMMAND may run, by file name
    timeout_s = 60

    [services.broker]                         # a target of the built-in actions
    start = ["mosquitto", "-p", "1884"]       # argv, never a shell line
    stop_signal = "TERM"                      # how `stop` ends it (default TERM)
    pidfile = "/run/mosquitto.pid"            # or: the agent's own child, started by `start`
    autostart = false                         # start it when the agent starts

A note can only name a handler in one of the directories and a service listed here; its
arguments travel as an argv list.
"""

from __future__ import annotations

import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AgentConfig", "ConfigError", "ServiceConfig", "load_config"]


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ServiceConfig:
    name: str
    start: tuple[str, ...] = ()
    stop_signal: signal.Signals = signal.SIGTERM
    pidfile: Path | None = None
    autostart: bool = False


@dataclass(frozen=True)
class AgentConfig:
    handler_dirs: tuple[Path, ...] = ()
    handler_timeout_s: float = 60.0
    services: dict[str, ServiceConfig] = field(default_factory=dict)


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
        unknown = set(entry) - {"start", "stop_signal", "pidfile", "autostart"}
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
            autostart=bool(entry.get("autostart", False)),
        )
        if not services[name].start and services[name].pidfile is None:
            raise ConfigError(f"{where}: needs start (an argv) or pidfile")
    return AgentConfig(
        handler_dirs=tuple(Path(d).resolve() for d in handlers.get("directories", [])),
        handler_timeout_s=float(handlers.get("timeout_s", 60.0)),
        services=services,
    )

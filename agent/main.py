"""`maestro-agent`: runs fault actions and user handlers on a SUT node.

USER_COMMAND names a built-in action on a service, fault proxy or network of the configuration
file (agent.targets), with `key=value` arguments and an optional `duration_s=N` (after which the
agent undoes it), or a handler (agent.handlers): an executable or a `handle(context)` Python
file, in a configured directory or a source AGENT_SOURCE fetched, run with a timeout. The agent
answers OK once the action has started, announces each action's start and end (AGENT_ACTION)
for the report's time axis, sends NOTIFY_COMMAND_FINISHED for handlers, and undoes what it
changed when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, ClassVar

from agent.config import AgentConfig, ConfigError, load_config
from agent.handlers import HandlerSources, find_handler, handler_argv
from agent.proxy import FaultProxy
from agent.services import Service
from agent.targets import Change, NetworkTarget, ProxyTarget, ServiceTarget, Target, parse_params
from protocol.codes import Role
from protocol.concurrency import run_blocking
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.file_check import check_files
from protocol.json_value import JsonObject
from protocol.notes import (
    AgentAction,
    AgentSource,
    CommandFinished,
    Note,
    OkResponse,
    StartAgent,
    StopAgent,
    StopTest,
    UserCommand,
)
from protocol.results import write_peer_json
from protocol.runtime import Peer, PeerConfig, PeerError

__all__ = ["Agent", "main"]

log = logging.getLogger(__name__)

# Built-in actions, by the kind of target they act on (agent.targets says what each takes).
ACTIONS = tuple(dict.fromkeys([*ServiceTarget.actions, *ProxyTarget.actions, *NetworkTarget.actions]))
_OUTPUT_TAIL = 2000


class Agent(Peer):
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = True

    def __init__(self, config: PeerConfig, agent_config: AgentConfig | None = None) -> None:
        super().__init__(config)
        self.agent_config = agent_config or AgentConfig()
        self.services = {
            name: Service(svc, config.data_dir / "services") for name, svc in self.agent_config.services.items()
        }
        self.proxies = {
            name: FaultProxy(name, proxy.listen, proxy.upstream) for name, proxy in self.agent_config.proxies.items()
        }
        self.networks = {
            name: NetworkTarget(net, config.data_dir / "networks") for name, net in self.agent_config.networks.items()
        }
        self.targets: dict[str, Target] = {
            **{name: ServiceTarget(service) for name, service in self.services.items()},
            **{name: ProxyTarget(proxy) for name, proxy in self.proxies.items()},
            **self.networks,
        }
        self.sources = HandlerSources(self.agent_config.handler_sources, config.data_dir / "sources")
        self.events: list[JsonObject] = []
        self._changed: dict[str, Change] = {}  # what stands changed -> how to put it back
        self._lock = asyncio.Lock()  # one action at a time

    async def startup(self) -> None:
        for network in self.networks.values():
            stale = await run_blocking(network.sweep)
            if stale:
                log.warning("network %s: removed %d rule(s) an earlier agent left", network.name, stale)
        for proxy in self.proxies.values():
            try:
                await proxy.start()
            except OSError as exc:
                raise PeerError(f"fault proxy {proxy.name} cannot listen on {proxy.listen}: {exc}") from exc
        for service in self.services.values():
            if service.config.autostart:
                await run_blocking(service.start)  # systemctl may take its time: off the loop

    def test_started(self) -> None:
        self.events = []

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
            case StartAgent():
                return OkResponse()
            case StopAgent() | StopTest():
                await self._restore()
                self._write_files()
                return OkResponse()
            case UserCommand():
                return self._command(note)
            case AgentSource():
                directory = await run_blocking(self.sources.fetch, note.url, note.branch)
                self._event("source", "fetched", note.url, branch=note.branch, directory=str(directory))
                return OkResponse()
            case _:
                return await super().handle_role_note(note)

    # --- commands ---------------------------------------------------------------------------

    def _command(self, note: UserCommand) -> OkResponse:
        if note.command in ACTIONS:
            target = self._target(note)
            params, duration_s = parse_params(note.command, target, list(note.args[1:]))
            target.check(note.command, params)
            self.spawn(self._act(note.command, target, params, duration_s))
            return OkResponse()
        path = find_handler(note.command, [*self.sources.directories, *self.agent_config.handler_dirs])
        context: JsonObject = {
            "command": note.command,
            "args": list(note.args),
            "test_id": self.test_id,
            "options": self.given,
            "agent": self.config.name,
        }
        self.spawn(self._run_handler(note.command, handler_argv(path, list(note.args), context), list(note.args)))
        return OkResponse()

    def _target(self, note: UserCommand) -> Target:
        known = ", ".join(self.targets) or "none configured"
        if not note.args:
            raise PeerError(f"{note.command}: name what it acts on ({known})")
        target = self.targets.get(note.args[0])
        if target is None:
            raise PeerError(f"{note.command}: no {note.args[0]!r} in the agent's configuration ({known})")
        if note.command not in target.actions:
            raise PeerError(
                f"{note.command}: {target.name} is a {target.kind}, which takes {', '.join(target.actions)}"
            )
        return target

    def _event(self, action: str, phase: str, target: str, **detail: Any) -> None:
        now = time.time_ns()
        self.events.append({"time_ns": now, "action": action, "phase": phase, "target": target, **detail})
        note = AgentAction(action=action, phase=phase, target=target, time_ns=now, detail=detail)
        self.bus.publish(self.topics.notifications, note)

    async def _act(self, action: str, target: Target, params: dict[str, str], duration_s: float) -> None:
        async with self._lock:
            self._event(action, "start", target.name, duration_s=duration_s, **params)
            try:
                change = await target.apply(action, params)
            except (PeerError, OSError) as exc:
                log.error("%s %s failed: %s", action, target.name, exc)
                self._event(action, "end", target.name, error=str(exc))
                return
            self._record(change)
            if not duration_s or change is None or change.undo is None:
                self._event(action, "end", target.name)
                return
        await asyncio.sleep(duration_s)
        async with self._lock:
            standing = self._changed.pop(change.key, None)
            if standing is not None and standing.undo is not None:
                await standing.undo()
            self._event(action, "end", target.name, restored=standing.restore if standing else None)

    def _record(self, change: Change | None) -> None:
        if change is None:
            return
        if change.undo is None:
            # The action put things back itself (start after stop, heal): nothing left to undo.
            for key in [k for k in self._changed if k == change.key or k.startswith(change.key + " ")]:
                del self._changed[key]
        else:
            self._changed.setdefault(change.key, change)

    async def _run_handler(self, name: str, argv: list[str], args: list[str]) -> None:
        started = time.monotonic()
        self._event(name, "start", "handler", args=args)
        # A session of its own, so a timeout kills the handler's children too (a shell script's
        # `sleep` would otherwise hold the output pipe open after the script is gone).
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), self.agent_config.handler_timeout_s)
            code = proc.returncode if proc.returncode is not None else -1
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = await proc.communicate()
            code = -int(signal.SIGKILL)
            output += f"\n[killed after {self.agent_config.handler_timeout_s:g} s]".encode()
        duration = time.monotonic() - started
        tail = output.decode(errors="replace")[-_OUTPUT_TAIL:]
        self._event(name, "end", "handler", exit_code=code)
        done = CommandFinished(command=name, exit_code=code, duration_s=duration, output_tail=tail)
        self.bus.publish(self.topics.notifications, done)

    # --- the end of a test ------------------------------------------------------------------

    async def coordinator_lost(self) -> None:
        # Nobody will send STOP_AGENT: put back what the test's actions changed.
        await self._restore()
        self._write_files()

    async def _restore(self) -> None:
        """Undo every change still standing: the SUT is left as the test found it."""
        async with self._lock:
            for key, change in list(self._changed.items()):
                try:
                    if change.undo is not None:
                        await change.undo()
                    self._event(change.restore, "restore", key)
                except (PeerError, OSError) as exc:
                    log.error("could not %s %s when restoring: %s", change.restore, key, exc)
            self._changed.clear()

    def _write_files(self) -> None:
        if not self.test_id:
            return
        directory = self.test_dir()
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / "agent-events.csv").open("w", newline="") as f:
            _write_events(f, self.events)
        files = ("agent-events.csv",)
        checks = check_files(directory, files)
        write_peer_json(directory, replace(self.peer_record(), events=tuple(self.events), files=files, checks=checks))

    async def shutdown(self) -> None:
        await super().shutdown()
        await self._restore()
        for proxy in self.proxies.values():
            await proxy.close()
        for service in self.services.values():
            if service.proc is not None and service.running():
                await run_blocking(service.stop)


def _write_events(f: IO[str], events: list[JsonObject]) -> None:
    writer = csv.writer(f)
    writer.writerow(["time_ns", "action", "phase", "target", "detail"])
    for e in events:
        detail = {k: v for k, v in e.items() if k not in ("time_ns", "action", "phase", "target")}
        writer.writerow([e["time_ns"], e["action"], e["phase"], e["target"], detail or ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-agent", "A Maestro agent daemon: injects faults and runs handlers on a SUT node.")
    parser.add_argument("--config", type=Path, help="the agent's configuration (TOML): what it may run and touch")
    args, _ = parser.parse_known_args(argv)
    try:
        agent_config = load_config(args.config)
    except ConfigError as exc:
        parser.error(str(exc))
    return run_daemon(lambda config: Agent(config, agent_config), parser, argv, lambda _args: Role.AGENT)

"""`maestro-agent`: runs fault actions and user handlers on a SUT node.

USER_COMMAND names a built-in action (`stop`, `start`, `restart`, `kill`, `pause`, `resume`)
with a service from the configuration file and an optional `duration_s=N` (after which the
agent undoes it), or a handler: an executable file in one of the configured directories, run
with the note's arguments as its argv and a timeout. The agent answers OK once the action has
started, announces each action's start and end (AGENT_ACTION) for the report's time axis,
sends NOTIFY_COMMAND_FINISHED for handlers, and undoes what it changed when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

from agent.config import AgentConfig, ConfigError, ServiceConfig, load_config
from protocol.codes import Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.notes import (
    AgentAction,
    CommandFinished,
    Note,
    OkResponse,
    StartAgent,
    StartTest,
    StopAgent,
    StopTest,
    TestStarted,
    UserCommand,
)
from protocol.runtime import Peer, PeerConfig, PeerError, UnsupportedError, resolve_test_dir, write_peer_json
from protocol.version import VERSION

__all__ = ["Agent", "main"]

log = logging.getLogger(__name__)

ACTIONS = ("stop", "start", "restart", "kill", "pause", "resume")
_STOP_WAIT_S = 10.0
_OUTPUT_TAIL = 2000


@dataclass
class _Service:
    config: ServiceConfig
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    def pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid if self.proc.poll() is None else None
        if self.config.pidfile is not None:
            try:
                return int(self.config.pidfile.read_text().strip())
            except (OSError, ValueError):
                return None
        return None

    def running(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def start(self) -> None:
        if self.running():
            raise PeerError(f"service {self.config.name} runs already")
        if not self.config.start:
            raise PeerError(f"service {self.config.name} has no start command in the agent's configuration")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.config.name}.log").open("ab") as out:
            self.proc = subprocess.Popen(list(self.config.start), stdout=out, stderr=subprocess.STDOUT)

    def send(self, sig: signal.Signals) -> int:
        pid = self.pid()
        if pid is None:
            raise PeerError(f"service {self.config.name} is not running")
        os.kill(pid, sig)
        return pid

    def stop(self, sig: signal.Signals | None = None) -> None:
        """Signal, then wait for it to go (SIGKILL after a while); blocks."""
        if self.paused:
            self.send(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.paused = False
        pid = self.send(sig or self.config.stop_signal)
        deadline = time.monotonic() + _STOP_WAIT_S
        while self.running() and time.monotonic() < deadline:
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(0.05)
            else:
                time.sleep(0.05)
        if self.running():
            log.warning("service %s (pid %d) ignored %s; killing it", self.config.name, pid, sig)
            os.kill(pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(5)


class Agent(Peer):
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = True

    def __init__(self, config: PeerConfig, agent_config: AgentConfig | None = None) -> None:
        super().__init__(config)
        self.agent_config = agent_config or AgentConfig()
        self.services = {
            name: _Service(svc, config.data_dir / "services") for name, svc in self.agent_config.services.items()
        }
        self.test_id = ""
        self.events: list[dict[str, Any]] = []
        self._changed: dict[str, str] = {}  # service -> what restores it ("start" or "resume")
        self._lock = asyncio.Lock()  # one action on the services at a time
        for service in self.services.values():
            if service.config.autostart:
                service.start()

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
            case StartTest():
                self.test_id = note.test_id
                self.events = []
                self.bus.publish(self.topics.notifications, TestStarted(test_id=note.test_id))
                return OkResponse()
            case StartAgent():
                return OkResponse()
            case StopAgent() | StopTest():
                await self._restore()
                self._write_files()
                return OkResponse()
            case UserCommand():
                return self._command(note)
            case _:
                return await super().handle_role_note(note)

    # --- commands ---------------------------------------------------------------------------

    def _command(self, note: UserCommand) -> OkResponse:
        if note.command in ACTIONS:
            service, duration_s = self._action_args(note)
            self.spawn(self._act(note.command, service, duration_s))
            return OkResponse()
        path = self._handler(note.command)
        self.spawn(self._run_handler(note.command, path, list(note.args)))
        return OkResponse()

    def _action_args(self, note: UserCommand) -> tuple[_Service, float]:
        if not note.args:
            raise PeerError(
                f"{note.command}: name the service ({', '.join(sorted(self.services)) or 'none configured'})"
            )
        service = self.services.get(note.args[0])
        if service is None:
            known = ", ".join(sorted(self.services)) or "none configured"
            raise PeerError(f"{note.command}: no service {note.args[0]!r} in the agent's configuration ({known})")
        duration_s = 0.0
        for arg in note.args[1:]:
            key, _, value = arg.partition("=")
            if key != "duration_s":
                raise PeerError(f"{note.command}: unknown argument {arg!r} (duration_s=N)")
            try:
                duration_s = float(value)
            except ValueError as exc:
                raise PeerError(f"{note.command}: duration_s {value!r} is not a number") from exc
        return service, duration_s

    def _handler(self, name: str) -> Path:
        if "/" in name or name.startswith("."):
            raise PeerError(f"handler {name!r}: a file name, not a path")
        for directory in self.agent_config.handler_dirs:
            path = directory / name
            if path.is_file() and os.access(path, os.X_OK):
                return path
        allowed = ", ".join(str(d) for d in self.agent_config.handler_dirs) or "none configured"
        raise UnsupportedError(f"no action or handler {name!r} (actions: {', '.join(ACTIONS)}; handlers in {allowed})")

    def _event(self, action: str, phase: str, target: str, **detail: Any) -> None:
        now = time.time_ns()
        self.events.append({"time_ns": now, "action": action, "phase": phase, "target": target, **detail})
        note = AgentAction(action=action, phase=phase, target=target, time_ns=now, detail=detail)
        self.bus.publish(self.topics.notifications, note)

    async def _act(self, action: str, service: _Service, duration_s: float) -> None:
        name = service.config.name
        async with self._lock:
            self._event(action, "start", name, duration_s=duration_s)
            try:
                await asyncio.to_thread(self._apply, action, service)
            except (PeerError, OSError) as exc:
                log.error("%s %s failed: %s", action, name, exc)
                self._event(action, "end", name, error=str(exc))
                return
            if not duration_s:
                self._event(action, "end", name)
                return
        await asyncio.sleep(duration_s)
        async with self._lock:
            undo = self._changed.pop(name, None)
            if undo:
                await asyncio.to_thread(self._apply, undo, service)
            self._event(action, "end", name, restored=undo)

    def _apply(self, action: str, service: _Service) -> None:
        name = service.config.name
        match action:
            case "start":
                service.start()
                self._changed.pop(name, None)
            case "stop" | "kill":
                service.stop(signal.SIGKILL if action == "kill" else None)
                self._changed[name] = "start"
            case "restart":
                if service.running():
                    service.stop()
                service.start()
            case "pause":
                service.send(signal.SIGSTOP)
                service.paused = True
                self._changed[name] = "resume"
            case "resume":
                service.send(signal.SIGCONT)
                service.paused = False
                self._changed.pop(name, None)

    async def _run_handler(self, name: str, path: Path, args: list[str]) -> None:
        started = time.monotonic()
        self._event(name, "start", "handler", args=args)
        # A session of its own, so a timeout kills the handler's children too (a shell script's
        # `sleep` would otherwise hold the output pipe open after the script is gone).
        proc = await asyncio.create_subprocess_exec(
            str(path),
            *args,
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

    async def _restore(self) -> None:
        """Undo every change still standing: the SUT is left as the test found it."""
        async with self._lock:
            for name, undo in list(self._changed.items()):
                try:
                    await asyncio.to_thread(self._apply, undo, self.services[name])
                    self._event(undo, "restore", name)
                except (PeerError, OSError) as exc:
                    log.error("could not %s %s when restoring: %s", undo, name, exc)
            self._changed.clear()

    def _write_files(self) -> None:
        if not self.test_id:
            return
        directory = resolve_test_dir(self.config.data_dir, self.test_id) / Role.AGENT.value / self.config.name
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / "agent-events.csv").open("w", newline="") as f:
            _write_events(f, self.events)
        info = {
            "name": self.config.name,
            "host": self.config.host,
            "peer_id": self.peer_id,
            "role": Role.AGENT.value,
            "test_id": self.test_id,
            "version": VERSION,
            "events": self.events,
            "files": ["agent-events.csv"],
        }
        write_peer_json(directory, info)

    async def shutdown(self) -> None:
        await super().shutdown()
        await self._restore()
        for service in self.services.values():
            if service.proc is not None and service.running():
                await asyncio.to_thread(service.stop)


def _write_events(f: IO[str], events: list[dict[str, Any]]) -> None:
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

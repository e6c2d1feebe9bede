"""A test's fault actions: each fired on its agent at its time from the senders' common start,
and what the agents report back (action starts and ends, handlers' results) kept for test.json."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from coordinator.bus.client import MaestroClient
from coordinator.definitions import Action
from coordinator.errors import PeerRequestError
from coordinator.registry import PeerInfo
from protocol.json_value import JsonObject
from protocol.notes import AgentAction, CommandFinished, UserCommand

__all__ = ["Actions"]

log = logging.getLogger(__name__)


@dataclass
class Actions:
    client: MaestroClient
    agents: list[PeerInfo]
    due: list[Action]  # not fired yet, soonest first
    events: list[JsonObject] = field(default_factory=list)  # agents' reports, in order

    @classmethod
    def of(cls, client: MaestroClient, agents: list[PeerInfo], actions: list[Action]) -> Actions:
        return cls(client, agents, sorted(actions, key=lambda a: a.at_s))

    def fire_due(self, load_start_s: float, now_s: float) -> list[str]:
        """Fire every action whose time has come; the refusals, each a reason to fail the test."""
        refused = []
        while self.due and now_s >= load_start_s + self.due[0].at_s:
            action = self.due.pop(0)
            peer = next(p for p in self.agents if p.name == action.agent)
            log.info("action at %g s: %s %s on %s", action.at_s, action.command, " ".join(action.args), action.agent)
            try:
                self.client.request(UserCommand(command=action.command, args=list(action.args)), to=peer)
            except PeerRequestError as exc:
                refused.append(f"action {action.command} at {action.at} refused: {exc}")
        return refused

    def take_events(self) -> None:
        ids = {p.peer_id for p in self.agents}
        while (note := self.client.next_notification((AgentAction, CommandFinished), ids, 0)) is not None:
            who = self.client.short_label(note.header.sender_id)
            if isinstance(note, AgentAction):
                self.events.append(
                    {"agent": who, "action": note.action, "phase": note.phase, "target": note.target}
                    | {"time": datetime.fromtimestamp(note.time_ns / 1e9, UTC).isoformat(), **note.detail}
                )
            elif isinstance(note, CommandFinished):
                self.events.append(
                    {"agent": who, "command": note.command, "exit_code": note.exit_code, "output": note.output_tail}
                )

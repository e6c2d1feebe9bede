"""Where a request goes (a topic) and which live peers must answer it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.registry import PeerInfo
from protocol.codes import Role
from protocol.topics import Topics

__all__ = ["Target", "Targets"]


@dataclass(frozen=True)
class Target:
    topic: str
    selects: Callable[[PeerInfo], bool]
    label: str


@dataclass(frozen=True)
class Targets:
    topics: Topics

    def everyone(self) -> Target:
        return Target(self.topics.everyone, lambda _p: True, "every peer")

    def workers(self) -> Target:
        return Target(self.topics.workers, lambda p: p.role.is_worker, "every worker")

    def role(self, role: Role) -> Target:
        return Target(self.topics.by_role(role), lambda p: p.role == role, f"every {role.value}")

    def peer(self, peer: PeerInfo) -> Target:
        return Target(self.topics.by_id(peer.peer_id), lambda p: p.peer_id == peer.peer_id, peer.label)

    def covering(self, peers: list[PeerInfo], live: list[PeerInfo]) -> list[Target]:
        """As few targets as reach exactly `peers`: a role's topic where they are every live peer
        of that role, one peer's topic for each of the rest."""
        targets: list[Target] = []
        for role in dict.fromkeys(p.role for p in peers):
            chosen = frozenset(p.peer_id for p in peers if p.role == role)
            if chosen == {p.peer_id for p in live if p.role == role}:
                targets.append(Target(self.topics.by_role(role), _one_of(chosen), f"every {role.value}"))
            else:
                targets += [self.peer(p) for p in peers if p.peer_id in chosen]
        return targets

    def of(self, to: Target | Role | PeerInfo | None) -> Target:
        if to is None:
            return self.everyone()
        if isinstance(to, Role):
            return self.role(to)
        if isinstance(to, PeerInfo):
            return self.peer(to)
        return to


def _one_of(peer_ids: frozenset[str]) -> Callable[[PeerInfo], bool]:
    return lambda p: p.peer_id in peer_ids

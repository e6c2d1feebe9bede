"""Collecting a test's files: every live peer uploads what it wrote for the test to the data
server (LOG); the lost ones are named, so nobody reads a partial result as a whole one."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.bus.client import MaestroClient
from coordinator.errors import MaestroError, PeerRequestError
from coordinator.registry import PeerInfo
from protocol.notes import LogRequest, UploadComplete

__all__ = ["COLLECT_TIMEOUT_S", "Collection", "collect"]

COLLECT_TIMEOUT_S = 300.0


@dataclass
class Collection:
    outcome: dict[str, str] = field(default_factory=dict)  # peer label -> what became of its files
    failures: list[str] = field(default_factory=list)  # each one fails the test


def collect(
    client: MaestroClient, peers: list[PeerInfo], test_id: str, upload_url: str, timeout_s: float = COLLECT_TIMEOUT_S
) -> Collection:
    result = Collection()
    asked = client.not_lost(peers)
    for peer in peers:
        if peer not in asked:
            result.outcome[peer.label] = "lost: its files stay on its host, if any"
    try:
        client.request_all(LogRequest(test_id=test_id, upload_url=upload_url), asked)
    except PeerRequestError as exc:
        answered = exc.complied
        for peer in asked:
            if peer.peer_id not in answered:
                result.outcome[peer.label] = f"refused: {exc}"
        asked = [p for p in asked if p.peer_id in answered]
    try:
        done = client.wait_for((UploadComplete,), asked, timeout_s=timeout_s)
    except MaestroError as exc:
        result.failures.append(f"collection: {exc}")
        return result
    for peer_id, note in done.items():
        assert isinstance(note, UploadComplete)
        label = client.label(peer_id)
        result.outcome[label] = note.message
        if not note.success:
            result.failures.append(f"collection: {label}: {note.message}")
    return result

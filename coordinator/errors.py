"""What the coordinator raises: the bottom of its layers, imported by all the others."""

from __future__ import annotations

from collections.abc import Callable

from protocol.correlation import Replies
from protocol.notes import InternalErrorResponse, Note, OkResponse, ProtocolErrorResponse

__all__ = [
    "MaestroError",
    "PeerRequestError",
    "Terminated",
    "interruption",
    "note_interruption",
    "stop_if_interrupted",
    "was_interrupted",
]


class MaestroError(Exception):
    pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, as `timeout` and a CI job's time limit send it: a test stops as on Ctrl-C, and
    its files are still collected and its record written."""


def interruption(exc: KeyboardInterrupt) -> str:
    """A test's reason when it was interrupted."""
    return f"interrupted ({exc})" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


# Process-wide on purpose: a test takes the interrupt into its result (its files are collected
# and recorded), and the script that ran it must still stop instead of starting its next test.
_INTERRUPTED: list[KeyboardInterrupt] = []


def note_interruption(exc: KeyboardInterrupt) -> str:
    """A test was interrupted: no other test starts in this process (`stop_if_interrupted`);
    the test's reason."""
    _INTERRUPTED.append(exc)
    return interruption(exc)


def was_interrupted() -> bool:
    return bool(_INTERRUPTED)


def stop_if_interrupted() -> None:
    """Before a test starts: the interrupt again, when an earlier test took one."""
    if _INTERRUPTED:
        raise _INTERRUPTED[0]


class PeerRequestError(MaestroError):
    """Some expected peers did not comply; the message names each one and why."""

    def __init__(self, message: str, replies: Replies) -> None:
        super().__init__(message)
        self.replies = replies

    @property
    def complied(self) -> set[str]:
        """The peers that did answer OK, when others did not."""
        return {peer_id for peer_id, note in self.replies.replies.items() if isinstance(note, OkResponse)}

    @classmethod
    def raise_unless_complete(
        cls, request: type[Note], target: str, replies: Replies, timeout_s: float, label: Callable[[str], str]
    ) -> None:
        """A reply complies when it is OK or the request's own response (PING, STATS, GET);
        anything else, a lost peer or a silent one is named."""
        faults = []
        for peer_id, note in sorted(replies.replies.items()):
            if isinstance(note, InternalErrorResponse):
                faults.append(f"{label(peer_id)} refused: {note.message} (code {note.code})")
            elif isinstance(note, ProtocolErrorResponse):
                faults.append(f"{label(peer_id)} could not read it: {note.reason}")
            elif not isinstance(note, OkResponse) and note.COMMAND != request.COMMAND:
                faults.append(f"{label(peer_id)} answered {type(note).__name__}")
        faults += [f"{label(p)} was lost (no answer to a PING)" for p in sorted(replies.lost)]
        faults += [f"{label(p)} did not answer within {timeout_s:g} s" for p in sorted(replies.missing)]
        if faults:
            raise cls(f"{request.__name__} to {target}: " + "; ".join(faults), replies)

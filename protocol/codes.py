"""Numeric codes that travel on the wire: note types, commands, roles, error codes.

Command codes follow Maestro Java 1.5 (the newest form of seed 004 appendix B). Codes we
added for what the design needs beyond Maestro start above 70.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = ["PROTOCOL_VERSION", "Command", "ErrorCode", "NoteType", "Role"]

# Bumped on any incompatible change of the envelope or of a note's fields.
PROTOCOL_VERSION = 1


class NoteType(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    NOTIFICATION = 2
    DATA = 3


class Command(IntEnum):
    START_WORKER = 0
    STOP_WORKER = 1
    START_TEST = 2
    STOP_TEST = 3
    START_INSPECTOR = 4
    STOP_INSPECTOR = 5
    SET = 7
    STATS = 8
    HALT = 9
    PING = 10
    OK = 11
    PROTOCOL_ERROR = 12
    INTERNAL_ERROR = 13
    ABNORMAL_DISCONNECT = 14
    NOTIFY_FAIL = 15
    NOTIFY_SUCCESS = 16
    GET = 17
    START_AGENT = 18
    STOP_AGENT = 19
    AGENT_SOURCE = 21
    USER_COMMAND = 30
    LOG = 40
    DRAIN = 41
    NOTIFY_DRAIN_COMPLETE = 42
    ROLE_ASSIGN = 60
    ROLE_UNASSIGN = 61
    NOTIFY_TEST_STARTED = 70
    # Ours, beyond Maestro Java 1.5.
    STATS_REPORT = 71
    AGENT_ACTION = 72
    NOTIFY_COMMAND_FINISHED = 73
    NOTIFY_PEER_ONLINE = 74
    PAUSE_WORKER = 75  # a receiver stops taking messages, so a backlog builds (seed 002)
    RESUME_WORKER = 76
    NOTIFY_UPLOAD_COMPLETE = 77  # a peer's answer to LOG, once the data server confirmed its files


class Role(StrEnum):
    """What a peer does; also the last part of its `by-role` topic."""

    OTHER = "other"  # a worker that waits for ROLE_ASSIGN
    SENDER = "sender"
    RECEIVER = "receiver"
    INSPECTOR = "inspector"
    AGENT = "agent"
    COORDINATOR = "coordinator"

    @property
    def is_worker(self) -> bool:
        return self in (Role.OTHER, Role.SENDER, Role.RECEIVER)


class Activity(StrEnum):
    """What a peer is doing, as it says in PING and STATS answers."""

    IDLE = "idle"
    RUNNING = "running"  # a test's work: load, inspection or an agent's watch


class ErrorCode(IntEnum):
    """The `code` of an INTERNAL_ERROR response."""

    FAILED = 1
    INVALID_OPTION = 2
    UNSUPPORTED = 3
    BUSY = 4
    TRY_AGAIN = 10  # as Maestro Java: the coordinator may retry the same request later


class ExitCode(IntEnum):
    """What every `maestro` command's exit status means (the README's table)."""

    SUCCESS = 0
    FAILED = 1  # a test failed, or a part of the run did (a report, a local process)
    CANNOT_RUN = 2  # a usage error, a definition refused, a broker or data server out of reach
    REGRESSION = 3  # `report --baseline`, `history --gate`
    INVALID = 4  # a test ran but did not measure the SUT (nor, then, can a comparison with it)
    INCONCLUSIVE = 5  # `history --gate` cannot judge: too few comparable runs, or noise wider than a threshold
    INTERRUPTED = 130

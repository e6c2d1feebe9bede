"""`maestro-agent`: runs fault actions and user handlers on a SUT node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from protocol.codes import Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.runtime import Peer

__all__ = ["Agent", "main"]


class Agent(Peer):
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = True


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-agent", "A Maestro agent daemon: injects faults and runs handlers on a SUT node.")
    return run_daemon(Agent, parser, argv, lambda _args: Role.AGENT)

"""`maestro-worker`: a sender or receiver, given its role at start or later by ROLE_ASSIGN."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from protocol.codes import Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.runtime import Peer

__all__ = ["Worker", "main"]


class Worker(Peer):
    ASSIGNABLE_ROLES: ClassVar[frozenset[Role]] = frozenset({Role.SENDER, Role.RECEIVER})


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-worker", "A Maestro sender or receiver daemon.")
    parser.add_argument(
        "--role",
        choices=[Role.SENDER.value, Role.RECEIVER.value],
        help="start as this role (default: none; wait for the coordinator to assign one)",
    )
    return run_daemon(Worker, parser, argv, lambda args: Role(args.role) if args.role else Role.OTHER)

"""`maestro-inspector`: reads a SUT's management interface on an interval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from protocol.codes import Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.runtime import Peer

__all__ = ["Inspector", "main"]


class Inspector(Peer):
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = True


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-inspector", "A Maestro inspector daemon: watches the SUT's management interface.")
    return run_daemon(Inspector, parser, argv, lambda _args: Role.INSPECTOR)

"""The command line every daemon shares: --broker, --name, --data-dir, logging, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from protocol.broker_url import BrokerUrlError, default_broker_url
from protocol.codes import Role
from protocol.presence import GRACE_S
from protocol.runtime import Peer, PeerConfig
from protocol.secrets import KEY_FILE_ENV, TOKEN_FILE_ENV, env_path, read_token_file
from protocol.signing import NoteKey
from protocol.topics import DEFAULT_PREFIX
from protocol.version import VERSION

__all__ = ["add_log_level", "configure_logging", "daemon_parser", "run_daemon"]


def configure_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )


def add_log_level(parser: argparse.ArgumentParser, default: str) -> None:
    """The `--log-level` every command of ours takes, for `configure_logging`."""
    parser.add_argument(
        "--log-level", default=default, choices=["debug", "info", "warning", "error"], help="(default: %(default)s)"
    )


def daemon_parser(prog: str, description: str) -> argparse.ArgumentParser:
    # @FILE reads arguments from FILE, one per line: how Ansible writes each daemon's configuration.
    parser = argparse.ArgumentParser(
        prog=prog, description=description, fromfile_prefix_chars="@", epilog="@FILE reads arguments, one per line."
    )
    parser.add_argument(
        "--broker",
        default=default_broker_url(),
        help="control broker URL, mqtt://[user:pw@]host[:port] or mqtts://... "
        "(default: $MAESTRO_BROKER or %(default)s)",
    )
    parser.add_argument("--name", help="peer name, unique on this host (default: ROLE-PID)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path("maestro-data"), help="where test files go (default: %(default)s)"
    )
    parser.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    add_log_level(parser, "info")
    parser.add_argument(
        "--coordinator-grace-s",
        type=float,
        default=GRACE_S,
        help="after the last will of the coordinator running this peer's test, how long (s, while connected) "
        "to wait for it to come back before stopping the test's work (default: %(default)s)",
    )
    parser.add_argument(
        "--key-file",
        type=Path,
        default=env_path(KEY_FILE_ENV),
        help="sign every note with the key in this file (mode 600, 16 bytes or more) and take only notes "
        "signed with it (default: $MAESTRO_KEY_FILE, else no signing)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=env_path(TOKEN_FILE_ENV),
        help="the data server's bearer token for uploads, in this file (mode 600) (default: $MAESTRO_TOKEN_FILE)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    return parser


def run_daemon(
    make_peer: Callable[[PeerConfig], Peer],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    role_of: Callable[[argparse.Namespace], Role],
) -> int:
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    role = role_of(args)
    try:
        config = PeerConfig(
            broker_url=args.broker,
            name=args.name or f"{role.value if role != Role.OTHER else 'worker'}-{os.getpid()}",
            role=role,
            data_dir=args.data_dir,
            topic_prefix=args.topic_prefix,
            coordinator_grace_s=args.coordinator_grace_s,
            key=NoteKey.from_file(args.key_file) if args.key_file else None,
            upload_token=read_token_file(args.token_file) if args.token_file else None,
        )
        peer = make_peer(config)
    except (BrokerUrlError, ValueError) as exc:
        parser.error(str(exc))
    return asyncio.run(peer.run())

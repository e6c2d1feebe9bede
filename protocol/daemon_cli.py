"""The command line every daemon shares: --broker, --name, --data-dir, logging, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from protocol.broker_url import BROKER_ENV, BrokerUrl, BrokerUrlError, default_broker_url
from protocol.codes import Role
from protocol.presence import GRACE_S
from protocol.runtime import Peer, PeerConfig
from protocol.secrets import KEY_FILE_ENV, TOKEN_FILE_ENV, env_path, exposed, read_token_file
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
        "--log-level",
        default=default,
        choices=["debug", "info", "warning", "error"],
        help="the least severe log record written to stderr (default: %(default)s)",
    )


def _udp_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def daemon_parser(prog: str, description: str) -> argparse.ArgumentParser:
    # @FILE reads arguments from FILE, one per line: how Ansible writes each daemon's configuration.
    parser = argparse.ArgumentParser(
        prog=prog, description=description, fromfile_prefix_chars="@", epilog="@FILE reads arguments, one per line."
    )
    parser.add_argument(
        "--broker",
        default=default_broker_url(),
        help="control broker URL, mqtt://[user:pw@]host[:port] or mqtts://..., or @FILE: the URL in FILE "
        "(mode 600) (default: $MAESTRO_BROKER or %(default)s)",
    )
    parser.add_argument(
        "--name", help="peer name, unique on this host (default: ROLE-PID, or worker-PID for a worker without --role)"
    )
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
    parser.add_argument(
        "--clock-port",
        type=_udp_port,
        default=0,
        help="UDP port on which this peer answers the coordinator's clock probes, which measure its clock "
        "offset whatever the control broker is (default: any free port; fix one where a firewall needs it)",
    )
    parser.add_argument(
        "--clock-address",
        action="append",
        default=[],
        help="an address the coordinator can reach this peer's clock port at, besides the one it reaches the "
        "control broker from (repeatable; for a NAT or a second network)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    return parser


def run_daemon(
    make_peer: Callable[[PeerConfig], Peer],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    role_of: Callable[[argparse.Namespace], Role],
) -> int:
    command_line = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(command_line)
    configure_logging(args.log_level)
    role = role_of(args)
    try:
        # Credentials come from the environment or a file only (#34: `--local` put the control
        # broker's password on every daemon's command line, for ps to show all run long).
        # The URL as given, not its password: percent-encoded there, and too short to look for alone.
        if BrokerUrl.parse(args.broker).password and (why := exposed(args.broker, command_line)):
            parser.error(f"the control broker's password {why}; give the URL in ${BROKER_ENV} or an @FILE (mode 600)")
        config = PeerConfig(
            broker_url=args.broker,
            name=args.name or f"{role.value if role != Role.OTHER else 'worker'}-{os.getpid()}",
            role=role,
            data_dir=args.data_dir,
            topic_prefix=args.topic_prefix,
            coordinator_grace_s=args.coordinator_grace_s,
            key=NoteKey.from_file(args.key_file) if args.key_file else None,
            upload_token=read_token_file(args.token_file) if args.token_file else None,
            clock_port=args.clock_port,
            clock_hosts=tuple(args.clock_address),
        )
        peer = make_peer(config)
    except (BrokerUrlError, ValueError) as exc:
        parser.error(str(exc))
    return asyncio.run(peer.run())

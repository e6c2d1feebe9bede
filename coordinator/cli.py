"""`maestro`: the coordinator's command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from coordinator.commands import DELEGATED, add_commands
from coordinator.definitions import DefinitionError
from coordinator.errors import MaestroError
from coordinator.local import LocalError
from coordinator.maestro import Maestro
from coordinator.registry import PeerInfo
from protocol.broker_url import BrokerUrlError, default_broker_url
from protocol.bus import BusError
from protocol.daemon_cli import add_log_level, configure_logging
from protocol.embedded_broker import EmbeddedBroker
from protocol.secrets import KEY_FILE_ENV, TOKEN_FILE_ENV, SecretFileError
from protocol.topics import DEFAULT_PREFIX
from protocol.version import VERSION

__all__ = ["format_peers", "main"]

log = logging.getLogger(__name__)


def format_peers(peers: Sequence[PeerInfo]) -> str:
    """The peers as an aligned text table, one row each."""
    header = ("NAME", "ROLE", "HOST", "STATE", "VERSION", "PID", "RTT ms", "CLOCK OFFSET ms", "ID")
    rows = [header]
    for p in peers:
        clock = p.clock
        rows.append(
            (
                p.name,
                p.role.value,
                p.host,
                p.state.value,
                p.version or "-",
                str(p.pid or "-"),
                f"{clock.rtt_us / 1000:.2f}" if clock else "-",
                f"{clock.offset_us / 1000:+.2f} ±{clock.uncertainty_us / 1000:.2f}" if clock else "-",
                p.peer_id,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _peer_json(p: PeerInfo) -> dict[str, object]:
    return {
        "id": p.peer_id,
        "name": p.name,
        "role": p.role.value,
        "host": p.host,
        "state": p.state.value,
        "version": p.version,
        "pid": p.pid,
        "rtt_us": p.clock.rtt_us if p.clock else None,
        "clock_offset_us": p.clock.offset_us if p.clock else None,
        "clock_uncertainty_us": p.clock.uncertainty_us if p.clock else None,
    }


def _cmd_peers(args: argparse.Namespace) -> int:
    with Maestro.connect(
        args.broker, topic_prefix=args.topic_prefix, discover_s=args.wait, timeout_s=args.timeout
    ) as maestro:
        peers = maestro.peers
    if args.json:
        print(json.dumps([_peer_json(p) for p in peers], indent=2))
    elif peers:
        print(format_peers(peers))
    else:
        print(f"no peers answered within {args.wait:g} s on {args.broker}", file=sys.stderr)
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(args.host, args.port) as broker:
        print(f"control broker listening on {broker.url} (Ctrl-C stops it)", flush=True)
        stop.wait()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="maestro",
        description="Coordinate performance tests of messaging systems across Maestro peers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    add_log_level(parser, "warning")
    parser.add_argument(
        "--key-file",
        type=Path,
        help="sign every note with the key in this file (mode 600), as peers started with it require; the "
        "daemons and `serve` that maestro starts get it too (default: $MAESTRO_KEY_FILE, else none)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="the data server's bearer token for uploads (mode 600); a data server maestro starts requires it "
        "(default: $MAESTRO_TOKEN_FILE, else none)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    peers = commands.add_parser("peers", help="list the live peers on a control broker")
    peers.add_argument(
        "--broker",
        default=default_broker_url(),
        help="control broker URL (default: $MAESTRO_BROKER or %(default)s)",
    )
    peers.add_argument("--topic-prefix", default=DEFAULT_PREFIX, help="MQTT topic prefix (default: %(default)s)")
    peers.add_argument(
        "--wait", type=float, default=1.0, help="seconds to wait for PING answers (default: %(default)s)"
    )
    peers.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the broker (default: %(default)s)"
    )
    peers.add_argument("--json", action="store_true", help="print JSON instead of a table")
    peers.set_defaults(run=_cmd_peers)

    broker = commands.add_parser("broker", help="run the embedded MQTT control broker in the foreground")
    broker.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    broker.add_argument("--port", type=int, default=1883, help="port to listen on (default: %(default)s)")
    broker.set_defaults(run=_cmd_broker)
    add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in DELEGATED:
        args.delegated = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    configure_logging(args.log_level)
    # Through the environment, so that the daemons and the data server started here read them too.
    for path, name in ((args.key_file, KEY_FILE_ENV), (args.token_file, TOKEN_FILE_ENV)):
        if path is not None:
            os.environ[name] = str(path.resolve())
    try:
        code: int = args.run(args)
    except (BrokerUrlError, BusError, MaestroError, DefinitionError, LocalError, SecretFileError, OSError) as exc:
        print(f"maestro {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"maestro {args.command}: interrupted", file=sys.stderr)
        return 130
    return code

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

from coordinator.cli.commands import DELEGATED, add_commands
from coordinator.definitions import DefinitionError
from coordinator.errors import MaestroError, Terminated, interruption
from coordinator.registry import PeerInfo
from coordinator.running.local import LocalError
from coordinator.running.maestro import Maestro
from protocol.broker_url import BROKER_ENV, BrokerUrl, BrokerUrlError, default_broker_url
from protocol.bus import BusError
from protocol.codes import ExitCode
from protocol.daemon_cli import add_log_level, configure_logging
from protocol.embedded_broker import EmbeddedBroker
from protocol.secrets import KEY_FILE_ENV, TOKEN_FILE_ENV, SecretFileError, redact_text
from protocol.signing import write_new_key
from protocol.topics import DEFAULT_PREFIX
from protocol.version import VERSION

__all__ = ["format_peers", "main", "nagle_warning", "unkeyed_warning"]

log = logging.getLogger(__name__)


# A PING round trip through the control broker in this band is Nagle's algorithm holding the
# broker's small writes against the client's delayed ACK (Linux: 40 ms): a stock Mosquitto's
# 42-44 ms here, under 1 ms with `set_tcp_nodelay true`.
_NAGLE_MS = (35.0, 50.0)


def format_peers(peers: Sequence[PeerInfo]) -> str:
    """The peers as an aligned text table, one row each: the round trip through the control
    broker, and the clock offset with its ± and how it was measured (udp: directly)."""
    header = ("NAME", "ROLE", "HOST", "STATE", "VERSION", "PID", "BROKER RTT ms", "CLOCK OFFSET ms", "KEY", "ID")
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
                f"{p.bus_rtt_us / 1000:.2f}" if p.bus_rtt_us is not None else "-",
                f"{clock.offset_us / 1000:+.3f} ±{clock.uncertainty_us / 1000:.3f} {clock.path}" if clock else "-",
                {True: "signed", False: "NONE", None: "-"}[p.signed_only],
                p.peer_id,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def nagle_warning(peers: Sequence[PeerInfo]) -> str | None:
    """A warning when the broker's round trips sit near 40 ms, or None."""
    slow = [p for p in peers if p.bus_rtt_us is not None and _NAGLE_MS[0] <= p.bus_rtt_us / 1000 <= _NAGLE_MS[1]]
    if not slow or len(slow) < len(peers) / 2:
        return None
    return (
        f"warning: {len(slow)} of {len(peers)} round trips through the control broker took 35-50 ms: Nagle's "
        "algorithm against delayed ACKs. Every request to the peers waits for it; set `set_tcp_nodelay true` in "
        "the broker's configuration (Mosquitto) to drop it to under a millisecond. Clock offsets measured "
        "directly (udp in the table) do not depend on it; those measured through the broker (mqtt) do, and are "
        "known only to half its round trip."
    )


def unkeyed_warning(peers: Sequence[PeerInfo]) -> str | None:
    """A warning naming the peers that take unsigned notes (KEY "NONE" in the table), or None."""
    open_to_all = [p.label for p in peers if p.signed_only is False]
    if not open_to_all:
        return None
    return (
        f"warning: {', '.join(open_to_all)} take(s) unsigned notes: anyone who can publish on the control broker "
        "can steer them. Give every daemon and maestro a cluster key (`maestro keygen`, then --key-file or "
        f"${KEY_FILE_ENV})."
    )


def _peer_json(p: PeerInfo) -> dict[str, object]:
    return {
        "id": p.peer_id,
        "name": p.name,
        "role": p.role.value,
        "host": p.host,
        "state": p.state.value,
        "version": p.version,
        "pid": p.pid,
        "rtt_us": p.bus_rtt_us,  # through the control broker
        "clock_offset_us": p.clock.offset_us if p.clock else None,
        "clock_uncertainty_us": p.clock.uncertainty_us if p.clock else None,
        "clock_path": p.clock.path if p.clock else None,
        "signed_only": p.signed_only,
    }


def _cmd_peers(args: argparse.Namespace) -> int:
    with Maestro.connect(
        args.broker, topic_prefix=args.topic_prefix, discover_s=args.wait, timeout_s=args.timeout
    ) as maestro:
        peers = maestro.peers
        maestro.measure_clocks(peers, direct_only=True)  # the PINGs measured them only through the broker
    if warning := nagle_warning(peers):
        print(warning, file=sys.stderr)
    if warning := unkeyed_warning(peers):
        print(warning, file=sys.stderr)
    if args.json:
        print(json.dumps([_peer_json(p) for p in peers], indent=2))
    elif peers:
        print(format_peers(peers))
    else:
        print(f"no peers answered within {args.wait:g} s on {redact_text(str(args.broker))}", file=sys.stderr)
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(args.host, args.port) as broker:
        print(f"control broker listening on {broker.url} (Ctrl-C stops it)", flush=True)
        stop.wait()
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    try:
        path = write_new_key(args.path)
    except FileExistsError:
        print(
            f"maestro keygen: {args.path} exists; it is left as it is (remove it first to make a new key)",
            file=sys.stderr,
        )
        return 2
    print(
        f"wrote a cluster key to {path} (mode 600). Give it to the coordinator and every daemon as "
        f"--key-file {path} or ${KEY_FILE_ENV} (the Ansible role's maestro_note_key deploys it)"
    )
    return 0


def _warn_of_a_password_in(args: argparse.Namespace) -> None:
    """The daemons maestro starts get the broker URL in their environment; its own command line
    is for ps to show as long as it runs."""
    given = getattr(args, "broker", None)
    if not given or given.startswith("@"):
        return  # an @FILE keeps it off the command line
    try:
        password = BrokerUrl.parse(given).password
    except BrokerUrlError:
        return  # said by whatever connects
    if password:
        print(
            f"maestro {args.command}: warning: the control broker's password is on this command line, where ps "
            f"shows it while maestro runs; ${BROKER_ENV} keeps it out",
            file=sys.stderr,
        )


def _terminate(_signum: int, _frame: object) -> None:
    raise Terminated("SIGTERM")


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

    peers = commands.add_parser(
        "peers",
        help="list the live peers on a control broker",
        description="List the peers that answer a PING on the control broker: name, role, host, state, version, "
        "the round trip through the broker and each one's clock offset.",
    )
    peers.add_argument(
        "--broker",
        default=default_broker_url(),
        help="control broker URL, or @FILE: the URL in FILE (mode 600) (default: $MAESTRO_BROKER or %(default)s)",
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

    broker = commands.add_parser(
        "broker",
        help="run the embedded MQTT control broker in the foreground",
        description="Run the embedded MQTT control broker (amqtt) in the foreground, for a lab without Mosquitto; "
        "Ctrl-C stops it.",
    )
    broker.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    broker.add_argument("--port", type=int, default=1883, help="port to listen on (default: %(default)s)")
    broker.set_defaults(run=_cmd_broker)

    keygen = commands.add_parser("keygen", help="write a new cluster key for signed notes to a file of mode 600")
    keygen.add_argument(
        "path", nargs="?", type=Path, default=Path("maestro.key"), help="the key file to write (default: %(default)s)"
    )
    keygen.set_defaults(run=_cmd_keygen)
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
    _warn_of_a_password_in(args)
    # As Ctrl-C: a running test stops, is collected and recorded, and what --local started stops.
    # (Python's default for SIGTERM ends the process at once, files uncollected and daemons left.)
    signal.signal(signal.SIGTERM, _terminate)
    # Through the environment, so that the daemons and the data server started here read them too.
    for path, name in ((args.key_file, KEY_FILE_ENV), (args.token_file, TOKEN_FILE_ENV)):
        if path is not None:
            os.environ[name] = str(path.resolve())
    try:
        code: int = args.run(args)
    except (BrokerUrlError, BusError, MaestroError, DefinitionError, LocalError, SecretFileError, OSError) as exc:
        print(f"maestro {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"maestro {args.command}: {interruption(exc)}", file=sys.stderr)
        return ExitCode.INTERRUPTED
    return code

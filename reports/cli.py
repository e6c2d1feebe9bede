"""`python -m reports serve`: the data server as its own process (the `maestro` CLI starts it so:
the coordinator package does not import this one)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from protocol.daemon_cli import configure_logging
from reports.server import create_app

__all__ = ["main"]

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="maestro serve", description="The data server: peers upload result files here."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the data server")
    serve.add_argument("--data", type=Path, default=Path("results"), help="the data root (default: %(default)s)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="(default: %(default)s)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        app = create_app(args.data)
    except OSError as exc:
        print(f"maestro serve: cannot use {args.data}: {exc}", file=sys.stderr)
        return 2
    log.info("data server on http://%s:%d, data root %s", args.host, args.port, args.data.resolve())
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0

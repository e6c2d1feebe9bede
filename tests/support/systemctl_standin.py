"""A stand-in for `systemctl` where systemd is not PID 1 (these machines): the command lines the
agent sends (`start`, `stop`, `is-active --quiet`, `kill --signal=SIG`, `show --property=MainPID
--value`, each with `-- UNIT`) drive a real process, as systemd would drive the unit's.

A unit is a file `$SYSTEMCTL_STANDIN_DIR/UNIT` with its command line, one argument a line; its
main pid is kept beside it. An unknown unit is refused as systemctl refuses one (exit 5). Every
call is appended to `calls.log` there, so a test sees exactly what the agent asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def main(argv: list[str]) -> int:
    folder = Path(os.environ["SYSTEMCTL_STANDIN_DIR"])
    with (folder / "calls.log").open("a") as log:
        log.write(" ".join(argv) + "\n")
    split = argv.index("--") if "--" in argv else len(argv)
    args, unit = argv[:split], " ".join(argv[split + 1 :])
    definition, pid_file = folder / unit, folder / f"{unit}.pid"
    if not definition.is_file():
        print(f"Failed to {args[0]} {unit}: Unit {unit} not found.", file=sys.stderr)
        return 5
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    running = pid > 0 and _alive(pid)
    match args:
        case ["is-active", *_]:
            return 0 if running else 3
        case ["show", "--property=MainPID", "--value"]:
            print(pid if running else 0)
        case ["start"]:
            if not running:
                command = definition.read_text().splitlines()
                # Its own session, and none of our pipes: the caller waits for those to close.
                child = subprocess.Popen(
                    command,
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                pid_file.write_text(str(child.pid))
        case ["stop"]:
            if running:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 10
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.02)
            pid_file.unlink(missing_ok=True)
        case ["kill", signal_arg] if signal_arg.startswith("--signal="):
            if not running:
                print(f"Failed to kill unit {unit}: No main process to kill", file=sys.stderr)
                return 1
            os.kill(pid, signal.Signals[signal_arg.removeprefix("--signal=")])
        case _:
            print(f"systemctl stand-in: {' '.join(argv)} is not what the agent sends", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m protocol.die_with_parent PID COMMAND [ARG...]`: run COMMAND so that it gets SIGTERM
when process PID, its parent, dies, kill -9 included.

`--local` and `maestro demo` start the daemons, the data server and tansu as processes of their
own sessions (Ctrl-C reaches only the coordinator, which stops the test first). A coordinator
killed with -9 left them all running with nothing to ever stop them (#34). Linux's
PR_SET_PDEATHSIG, set here and kept across the exec, ends them instead: the daemons stop as on
SIGTERM, keeping their files. (Popen's preexec_fn could set it with no extra step, but it is
not safe in a process that runs threads, as the coordinator does.) The signal comes when the
*thread* that started the process ends: start them from the coordinator's main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

__all__ = ["guarded", "main"]

_PR_SET_PDEATHSIG = 1


def guarded(argv: Sequence[str]) -> list[str]:
    """`argv`, to be run so that it ends with this process."""
    return [sys.executable, "-m", "protocol.die_with_parent", str(os.getpid()), *argv]


def main(argv: Sequence[str]) -> int:
    parent, command = int(argv[0]), list(argv[1:])
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is not None:  # Linux; elsewhere the command runs unguarded
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # it died before the prctl: no signal would ever come
            print(f"die_with_parent: process {parent} is gone already; not starting {command[0]}", file=sys.stderr)
            return 1
    os.execvp(command[0], command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

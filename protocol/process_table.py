"""The live processes of this machine whose command line names something: the agent finds a
service it did not start by it, and the reporter tells a JVM still writing its class-data
archive by it. Linux's /proc; elsewhere none is found."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["processes_naming"]


def processes_naming(text: str) -> list[int]:
    """The pids of the live processes, this one left out, whose command line contains `text`
    (a zombie has ended already, whatever its parent has not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found

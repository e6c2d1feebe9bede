"""The live processes of this machine whose command line names something: the agent finds a
service it did not start by it, and the reporter tells a JVM still writing its class-data
archive by it. Linux's /proc; elsewhere none is found."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["process_state", "processes_naming"]


def process_state(pid: int) -> str:
    """Its state letter from /proc (R, S, T, Z, ...); OSError once it is gone. The name in
    parentheses may hold spaces and parentheses itself, so the fields after the last one count."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def processes_naming(text: str) -> list[int]:
    """The pids of the live processes, this one left out, whose command line contains `text`
    (a zombie has ended already, whatever its parent has not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = process_state(int(entry.name))
        except (OSError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found

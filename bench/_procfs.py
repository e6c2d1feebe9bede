"""What /proc says of a process and its children, for the benches that print memory."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["descendants", "status_kb"]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children first."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue  # it ended between the listing and the reading
            found += children
            todo += children
    return found


def status_kb(pid: int, field: str) -> tuple[str, int, int]:
    """(name, `field` of /proc/PID/status in kB (VmRSS, VmHWM), open file descriptors); zeros
    for a process that is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return "?", 0, 0
    name = next((line.split()[1] for line in lines if line.startswith("Name:")), "?")
    kb = next((int(line.split()[1]) for line in lines if line.startswith(f"{field}:")), 0)
    return name, kb, fds

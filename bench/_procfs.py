"""What /proc says of processes, for the benches that print memory and CPU."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

__all__ = ["CpuSampler", "descendants", "pids_named", "status_kb"]


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


def _machine_busy_ticks() -> int:
    """Clock ticks all cores spent on anything but idle and I/O wait, since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]


def _ticks_of(pids: list[int]) -> int:
    """User and system ticks of `pids` (their threads included); a gone one counts none."""
    total = 0
    for pid in pids:
        try:
            after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(after_name[11]) + int(after_name[12])  # utime, stime: fields 14 and 15
    return total


def pids_named(name: str) -> list[int]:
    """Every process whose command name starts with `name` (the kernel keeps 15 characters of
    it: tansu's is `tansu-v0.6.0-51`)."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip().startswith(name[:15]):
                found.append(int(comm.parent.name))
        except OSError:
            continue
    return found


class CpuSampler:
    """The machine's busy ticks and those of named processes (a broker), sampled on a thread
    every `every_s`, so that a span measured afterwards (first to last message) gets its CPU
    without the start-up and close around it: is the machine, or the broker, the limit?"""

    def __init__(self, names: tuple[str, ...], every_s: float = 0.05) -> None:
        self._pids = {name: pids_named(name) for name in names}
        self._every_s = every_s
        self._samples: list[tuple[float, int, dict[str, int]]] = []  # (wall s, machine, by name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        by_name = {name: _ticks_of(pids) for name, pids in self._pids.items()}
        self._samples.append((time.time(), _machine_busy_ticks(), by_name))

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    def percent(self, start_s: float, end_s: float) -> dict[str, float]:
        """Percent of one core (the machine's up to 100 times its cores) between the samples
        that enclose [start_s, end_s] (wall clock): "machine" and each name; NaN where no two
        samples enclose it. The kernel counts in ticks (10 ms): read a span under a second as
        rough."""
        before = [s for s in self._samples if s[0] <= start_s] or self._samples[:1]
        after = [s for s in self._samples if s[0] >= end_s] or self._samples[-1:]
        (t0, m0, n0), (t1, m1, n1) = before[-1], after[0]
        if t1 <= t0:
            return {"machine": math.nan} | {name: math.nan for name in n0}
        seconds = (t1 - t0) * os.sysconf("SC_CLK_TCK") / 100
        return {"machine": (m1 - m0) / seconds} | {name: (n1[name] - n0[name]) / seconds for name in n0}

"""The lock by which a test marked `quiet` has the machine to itself (tests/support/machine_lock.py):
shared tests run side by side, a quiet one runs alone, and tests that come while it waits wait
behind it. flock(2) locks belong to open file descriptions, so threads stand in for the workers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from support.machine_lock import the_machine


def test_a_quiet_test_waits_for_the_running_ones_and_the_next_ones_wait_for_it(tmp_path: Path) -> None:
    events: list[str] = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            events.append(what)

    def test(name: str, alone: bool, hold_s: float) -> None:
        with the_machine(tmp_path, alone=alone):
            note(f"{name} in")
            time.sleep(hold_s)
            note(f"{name} out")

    first = threading.Thread(target=test, args=("shared-1", False, 0.4))
    beside = threading.Thread(target=test, args=("shared-2", False, 0.4))
    quiet = threading.Thread(target=test, args=("quiet", True, 0.3))
    later = threading.Thread(target=test, args=("shared-3", False, 0.1))
    first.start()
    beside.start()
    time.sleep(0.1)  # both shared tests are in
    quiet.start()
    time.sleep(0.1)  # the quiet one waits at the room, holding the turnstile
    later.start()
    for thread in (first, beside, quiet, later):
        thread.join(5)
    assert set(events[:2]) == {"shared-1 in", "shared-2 in"}  # side by side
    assert set(events[2:4]) == {"shared-1 out", "shared-2 out"}
    # The quiet test ran alone, and the test that came while it waited went after it.
    assert events[4:] == ["quiet in", "quiet out", "shared-3 in", "shared-3 out"]

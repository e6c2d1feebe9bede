"""A control broker restarted in the middle of a test: the test that rides it out, the restart
on a timer, and the judgement of a run through an 8 s restart (#34). Shared by
tests/integration/test_control_broker_outage.py and bench/control_broker_restarts.py."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator import FixedRateTest, Maestro, TestResult
from support.processes import Daemons, PrivateMosquitto, stock_mosquitto

__all__ = ["RESTART_GAP_S", "Restarted", "gap_test", "restart_loop", "run_with_a_restart"]

RESTART_GAP_S = 8.0
# In the loop the peers give up on a coordinator this long (connected) after its will, instead
# of 15 s, so a peer that lost its coordinator in the gap fails its short test: the load (16 s,
# the broker gone from about 2 s to 10 s into it) goes on about 6 s after the broker is back,
# more than this plus the 2 s by which the peers' returns may be apart (their reconnect backoff).
LOOP_GRACE_S = 4


def gap_test(duration: str) -> FixedRateTest:
    return FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/maestro-gap-{uuid.uuid4().hex[:8]}",
        rate=50,
        parallel=2,
        duration=duration,
        warm_up="0s",
    )


@dataclass(frozen=True)
class Restarted:
    result: TestResult
    down_s: float  # how long the broker was in fact away (PrivateMosquitto.restart)


def run_with_a_restart(
    m: Maestro, broker: PrivateMosquitto, test: FixedRateTest, *, after_s: float, gap_s: float, during_gap: Any = None
) -> Restarted:
    """`test`, with the control broker restarted `after_s` into its run, away for `gap_s`."""
    down: list[float] = []
    timer = threading.Timer(after_s, lambda: down.append(broker.restart(gap_s, during_gap)))
    timer.start()
    try:
        result = m.run(test, progress=False)
    finally:
        timer.join()
    assert down, "the broker's restart failed (see the timer thread's error above)"
    return Restarted(result, down[0])


def _not_as_it_should_be(restarted: Restarted) -> str | None:
    """Why a run through an 8 s restart is wrong, or None: it must pass with every message
    once, and record the outage (8 s, or as long as the broker was in fact away, and the 2 s of
    the coordinator's reconnect backoff)."""
    result = restarted.result
    if not result.passed:
        return f"failed: {result.reason}"
    s = result.summary
    if (s.sent, s.received, s.lost, s.duplicates) != (1600, 1600, 0, 0):
        return f"counts {s.sent}, {s.received}, {s.lost}, {s.duplicates}"
    outages = result.record.control_outages or ()
    if len(outages) != 1 or not RESTART_GAP_S <= (outages[0].seconds or 0.0) <= restarted.down_s + 3:
        return f"outages {outages}, the broker away {restarted.down_s:.1f} s"
    return None


def restart_loop(directory: Path, prefix: str, data_server: str, restarts: int) -> dict[int, str]:
    """`restarts` tests on the same two daemons and coordinator, each through an 8 s restart of
    a stock-configured Mosquitto about 2 s into its load; what went wrong, by run."""
    (directory / "broker").mkdir(parents=True)
    broker = stock_mosquitto(directory / "broker")
    broker.start()
    daemons = Daemons(broker.url, prefix, directory)
    grace = ("--coordinator-grace-s", str(LOOP_GRACE_S))
    failures: dict[int, str] = {}
    try:
        daemons.start("maestro-worker", "r1", "--role", "receiver", *grace)
        daemons.start("maestro-worker", "s1", "--role", "sender", *grace)
        with Maestro.connect(broker.url, topic_prefix=prefix, discover_s=1, data_server=data_server) as m:
            m.wait_for_peers(2, timeout_s=20)
            for run in range(restarts):
                # About 2 s into the load (SET, the clock PINGs and START take ~1 s through it).
                restarted = run_with_a_restart(m, broker, gap_test("16s"), after_s=3.0, gap_s=RESTART_GAP_S)
                why = _not_as_it_should_be(restarted)
                if why is not None:
                    failures[run] = why
    finally:
        daemons.kill_all()
        broker.stop()
    return failures

"""Soak: a long fixed-rate test, and whether any daemon grows while it runs.

Starts a sender and a receiver worker, an inspector and an agent, and the data server, on
Mosquitto (127.0.0.1:1883, a topic prefix of the run's own) with RabbitMQ (127.0.0.1:5672) as
the SUT, then runs one fixed-rate test through them. Every interval it prints each daemon's
resident memory and open file descriptors (the daemon and its child processes, from /proc).
At the end: each daemon's growth from the sample at minute 5 (a sixth of the run in smoke
mode: past start-up and warm-up) to the last sample of the run. Target (#15): under 10 %.

Prints figures; asserts nothing (these machines are shared and noisy).

    python bench/soak.py                       # 30 minutes at 500 msg/s, a sample a minute
    python bench/soak.py --minutes 60 --rate 2000
    python bench/soak.py --smoke               # 12 s, a sample every 2 s: that it still runs
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from _procfs import descendants, status_kb

from coordinator import Fail, FixedRateTest, Maestro, TestResult
from coordinator.running.local import LocalCluster

BROKER = "mqtt://127.0.0.1:1883"
SUT = "amqp://guest:guest@127.0.0.1:5672"
DAEMONS = {  # name: (command, extra arguments)
    "sender": ("maestro-worker", ("--role", "sender")),
    "receiver": ("maestro-worker", ("--role", "receiver")),
    "inspector": ("maestro-inspector", ()),
    "agent": ("maestro-agent", ()),
}


@dataclass
class Sample:
    at_s: float
    rss_mb: dict[str, float] = field(default_factory=dict)
    fds: dict[str, int] = field(default_factory=dict)


def _rss_mb_and_fds(pid: int) -> tuple[float, int]:
    """The daemon and its child processes together."""
    rss_kb = fds = 0
    for each in (pid, *descendants(pid)):
        _, kb, n = status_kb(each, "VmRSS")
        rss_kb, fds = rss_kb + kb, fds + n
    return rss_kb / 1024, fds


def _growth(first: float, last: float) -> str:
    return f"{(last - first) / first * 100:+.1f} %" if first else "n/a"


def _sample(
    procs: dict[str, subprocess.Popen[bytes]], runner: threading.Thread, duration_s: float, every_s: float
) -> list[Sample]:
    """A sample every `every_s` while the test runs, each printed as it is taken."""
    names = list(procs)
    print(f"{'at':>7}  " + "  ".join(f"{n + ' MB':>13} {'fds':>4}" for n in names), flush=True)
    samples: list[Sample] = []
    started = time.monotonic()
    while runner.is_alive():
        time.sleep(every_s - (time.monotonic() - started) % every_s)
        sample = Sample(time.monotonic() - started)
        if sample.at_s > duration_s:
            break  # the load is over: collection and stopping are not the run
        for name, proc in procs.items():
            sample.rss_mb[name], sample.fds[name] = _rss_mb_and_fds(proc.pid)
        samples.append(sample)
        row = "  ".join(f"{sample.rss_mb[n]:13.1f} {sample.fds[n]:4d}" for n in names)
        print(f"{sample.at_s:6.0f}s  {row}", flush=True)
    return samples


def _print_growth(samples: list[Sample], baseline_at_s: float) -> None:
    if not samples:
        raise SystemExit("soak: no sample was taken while the test ran")
    base = min(samples, key=lambda each: abs(each.at_s - baseline_at_s))
    last = samples[-1]
    print(f"growth from {base.at_s:.0f} s to {last.at_s:.0f} s (target: under 10 %):")
    for name in base.rss_mb:
        print(
            f"  {name:<10} RSS {base.rss_mb[name]:7.1f} -> {last.rss_mb[name]:7.1f} MB "
            f"({_growth(base.rss_mb[name], last.rss_mb[name])}), "
            f"fds {base.fds[name]} -> {last.fds[name]} ({_growth(base.fds[name], last.fds[name])})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="the test's length (default: %(default)s)")
    parser.add_argument("--rate", type=int, default=500, help="msg/s (default: %(default)s)")
    parser.add_argument("--every-s", type=float, default=60.0, help="seconds between samples (default: 60)")
    parser.add_argument("--smoke", action="store_true", help="12 s, a sample every 2 s")
    args = parser.parse_args()
    duration_s, every_s = (12.0, 2.0) if args.smoke else (args.minutes * 60, args.every_s)

    with tempfile.TemporaryDirectory(prefix="maestro-soak-") as tmp:
        run_dir = Path(tmp)
        prefix = f"/mpt-soak-{uuid.uuid4().hex[:8]}"
        with LocalCluster(run_dir / "logs", topic_prefix=prefix, broker_url=BROKER) as local:
            data_server = local.data_server(run_dir / "results")
            procs = {name: local.daemon(cmd, name, run_dir / name, *extra) for name, (cmd, extra) in DAEMONS.items()}
            test = FixedRateTest(
                send_url=f"{SUT}/maestro-soak-{uuid.uuid4().hex[:8]}",
                rate=args.rate,
                duration=f"{duration_s:g}s",
                inspectors=("host",),
                agents=("agent",),
                options={"inspector_interval_s": 5},
                fail=Fail(max_loss_ratio=0.0),
            )
            outcome: list[TestResult | BaseException] = []

            def run() -> None:
                try:
                    with Maestro.connect(BROKER, topic_prefix=prefix, discover_s=1, data_server=data_server) as m:
                        m.wait_for_peers(len(DAEMONS), timeout_s=30)
                        outcome.append(m.run(test, progress=False))
                except BaseException as exc:
                    outcome.append(exc)

            runner = threading.Thread(target=run, name="soak-test")
            runner.start()
            where = SUT.split("@")[1]
            print(f"soak: {args.rate} msg/s for {duration_s:g} s through {where}, a sample every {every_s:g} s")
            samples = _sample(procs, runner, duration_s, every_s)
            runner.join()

    result = outcome[0] if outcome else RuntimeError("the test did not end")
    if isinstance(result, BaseException):
        raise SystemExit(f"soak: the test could not run: {result}")
    s = result.summary
    print(f"test: {result.outcome}; sent {s.sent}, received {s.received}, lost {s.lost}")
    _print_growth(samples, duration_s / 6 if args.smoke else 300.0)


if __name__ == "__main__":
    main()

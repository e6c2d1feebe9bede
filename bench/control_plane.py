"""The control plane at lab scale: how long from "N peers are there" to "the load starts".

Starts N lightweight simulated workers through the real peer runtime (`protocol.runtime.Peer`:
its bus, dispatcher and PING/SET handling; only the work itself is left out), many per process
over a few processes, one MQTT connection each, against Mosquitto on 1883 under a topic prefix
of the run's own. Half are senders, half receivers, as in a test. The coordinator's real client
then does what a phase does before load, and each step is timed:

- ping:        one PING to everyone, every known peer answering (the broker's fan-out floor);
- set:         SET to the senders and to the receivers;
- start_test:  START_TEST to all;
- start:       START_WORKER to the receivers, then one to the senders with the common start;
- ready→load:  from the first SET to the last sender's OK, so the common start can be kept;
- per peer:    SET and START_TEST sent one peer at a time, as the coordinator did before (up to
               200 peers), for comparison with `set` + `start_test`;
- spread:      how far apart the senders woke for the common start, and how many starts a clock
               correction moved (on one host, none should: the spread is then the simulation's
               own scheduling on these 2 cores, not the control plane's).

Prints figures; asserts nothing (these machines are shared and noisy).

    python bench/control_plane.py [--peers 50 200 1000] [--processes 4]
    python bench/control_plane.py --smoke     # 10 peers: that it still runs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from statistics import median

from coordinator.registry import PeerInfo
from coordinator.running.maestro import Maestro
from protocol.codes import Role
from protocol.notes import Note, OkResponse, SetRequest, StartTest, StartWorker, StopWorker, TestSucceeded
from protocol.runtime import Peer, PeerConfig

BROKER = "mqtt://127.0.0.1:1883"
# Up to this many peers, the steps are also timed one request per peer (slow beyond).
_PER_PEER_UP_TO = 200
# The senders' common start is this far after START_WORKER is sent (a phase's margin).
_START_MARGIN_S = 1.0


class SimulatedWorker(Peer):
    """A worker whose work is to wake at the common start and say how late it woke."""

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
            case StartWorker() if self.role == Role.SENDER:
                self.spawn(self._wake(note.start_for(self.peer_id)))
                return OkResponse()
            case StartWorker() | StopWorker():
                return OkResponse()
        return await super().handle_role_note(note)

    async def _wake(self, start_at_ns: int) -> None:
        await asyncio.sleep(max(0.0, start_at_ns - time.time_ns()) / 1e9)
        woke_ns = time.time_ns()
        test_id = self.test_id  # START_TEST named it (protocol.runtime)
        # When it meant to start (its clock's common start) and when it woke, to tell the
        # coordinator's correction from this simulation's own scheduling delay.
        message = f"{start_at_ns} {woke_ns}"
        self.bus.publish(self.topics.notifications, TestSucceeded(test_id=test_id, message=message))


async def serve_peers(prefix: str, first: int, count: int, data_dir: Path) -> None:
    peers = []
    for n in range(first, first + count):
        role = Role.SENDER if n % 2 == 0 else Role.RECEIVER
        config = PeerConfig(BROKER, f"sim-{n}", role, data_dir=data_dir, topic_prefix=prefix, host="bench")
        peers.append(SimulatedWorker(config))
    await asyncio.gather(*(peer.run() for peer in peers))


def _spawn(prefix: str, peers: int, processes: int, data_dir: Path) -> list[subprocess.Popen[bytes]]:
    per = -(-peers // processes)
    children = []
    for first in range(0, peers, per):
        count = min(per, peers - first)
        argv = [sys.executable, __file__, "--serve", prefix, str(first), str(count), str(data_dir)]
        children.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return children


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)  # each process holds many peers: no clean stop needed
    for child in children:
        child.wait(timeout=30)


def _timed(what: dict[str, float], name: str, step: object) -> None:
    started = time.perf_counter()
    step()  # type: ignore[operator]
    what[name] = time.perf_counter() - started


def measure(peers: int, processes: int, data_dir: Path) -> dict[str, float]:
    prefix = f"/bench-{uuid.uuid4().hex[:8]}"
    children = _spawn(prefix, peers, processes, data_dir)
    try:
        with Maestro.connect(BROKER, topic_prefix=prefix, discover_s=0, data_server="http://127.0.0.1:1") as m:
            m.wait_for_peers(peers, timeout_s=60 + peers / 10)
            everyone = m.peers
            senders: list[PeerInfo] = [p for p in everyone if p.role == Role.SENDER]
            receivers: list[PeerInfo] = [p for p in everyone if p.role == Role.RECEIVER]
            test_id = f"bench-{uuid.uuid4().hex[:6]}"
            t: dict[str, float] = {}
            _timed(t, "ping", lambda: m.ping_all(everyone, samples=1, timeout_s=60))
            for p in everyone:
                p.clock = None
            # What a phase does before the load: a PING, then a burst of UDP probes to each peer.
            _timed(t, "clocks", lambda: m.measure_clocks(everyone))
            t["rtt_median_ms"] = median(p.bus_rtt_us / 1000 for p in everyone if p.bus_rtt_us is not None)
            clocks = [p.clock for p in everyone if p.clock is not None]
            t["direct"] = sum(1 for c in clocks if c.path == "udp")
            t["uncertainty_max_ms"] = max(c.uncertainty_us for c in clocks) / 1000
            started = time.perf_counter()

            def set_all() -> None:
                for_senders = SetRequest(options={"test_id": test_id, "rate_per_s": 10})
                for_receivers = SetRequest(options={"test_id": test_id})
                m.request_each([(for_senders, senders), (for_receivers, receivers)], timeout_s=60)

            _timed(t, "set", set_all)
            _timed(t, "start_test", lambda: m.request_all(StartTest(test_id=test_id), everyone, timeout_s=60))
            start_at_ns = 0

            def start() -> None:
                nonlocal start_at_ns
                m.request_all(StartWorker(), receivers, timeout_s=60)
                start_at_ns = time.time_ns() + int(_START_MARGIN_S * 1e9)
                offsets = {p.peer_id: p.correction_ns() for p in senders if p.correction_ns()}
                m.request_all(StartWorker(start_at_ns=start_at_ns, clock_offsets_ns=offsets), senders, timeout_s=60)

            _timed(t, "start", start)
            t["ready_to_load"] = time.perf_counter() - started
            if peers <= _PER_PEER_UP_TO:
                # The same steps one peer at a time, as the coordinator did before: the baseline.
                begun = time.perf_counter()
                for note in (SetRequest(options={"test_id": test_id}), StartTest(test_id=f"{test_id}-2")):
                    for peer in everyone:
                        m.request(note, to=peer, timeout_s=60)
                t["per_peer"] = time.perf_counter() - begun
            woke = m.wait_for((TestSucceeded,), senders, timeout_s=60)
            times = [tuple(map(int, n.message.split())) for n in woke.values() if isinstance(n, TestSucceeded)]
            corrections_ms = [abs(meant - start_at_ns) / 1e6 for meant, _ in times]
            late_ms = sorted((woke - start_at_ns) / 1e6 for _, woke in times)
            t["late_min_ms"], t["late_median_ms"], t["late_max_ms"] = late_ms[0], median(late_ms), late_ms[-1]
            t["corrected"] = sum(1 for c in corrections_ms if c > 0)
            t["correction_max_ms"] = max(corrections_ms)
            t["spread_ms"] = late_ms[-1] - late_ms[0]
            return t
    finally:
        _stop(children)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--processes", type=int, default=4, help="processes the peers are spread over")
    parser.add_argument("--smoke", action="store_true", help="10 peers, 2 processes")
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        prefix, first, count, data_dir = args.serve
        asyncio.run(serve_peers(prefix, int(first), int(count), Path(data_dir)))
        return
    sizes, processes = ([10], 2) if args.smoke else (args.peers, args.processes)
    data_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"maestro-bench-{uuid.uuid4().hex[:6]}"
    print(f"control plane on {BROKER}: simulated workers (half senders) in {processes} processes")
    header = f"{'peers':>6} {'ping':>8} {'clocks':>8} {'set':>8} {'start_test':>10} {'start':>8} {'ready→load':>11}"
    print(header + f" {'per peer':>9} {'spread':>9}")
    for peers in sizes:
        t = measure(peers, processes, data_dir)
        print(
            f"{peers:>6} {t['ping']:>7.3f}s {t['clocks']:>7.3f}s {t['set']:>7.3f}s {t['start_test']:>9.3f}s"
            f" {t['start']:>7.3f}s"
            f" {t['ready_to_load']:>10.3f}s {_seconds(t.get('per_peer')):>9} {t['spread_ms']:>7.2f}ms"
            f"   (senders woke {t['late_min_ms']:+.2f} .. {t['late_max_ms']:+.2f} ms from the common start,"
            f" median {t['late_median_ms']:+.2f}; {t['corrected']:.0f} starts moved by a clock offset, at most"
            f" {t['correction_max_ms']:.2f} ms; PING round trip median {t['rtt_median_ms']:.1f} ms;"
            f" {t['direct']:.0f} clocks measured directly, ± at most {t['uncertainty_max_ms']:.3f} ms)"
        )


if __name__ == "__main__":
    main()

"""`maestro-worker`: a sender or receiver, given its role at start or later by ROLE_ASSIGN."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from protocol.codes import Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    Note,
    OkResponse,
    PauseWorker,
    ResumeWorker,
    StartTest,
    StartWorker,
    StatsReport,
    StopTest,
    StopWorker,
    TestFailed,
    TestStarted,
    TestSucceeded,
)
from protocol.options import Duration, MessageSize, OptionError
from protocol.ratefile import RateFileWriter
from protocol.runtime import Peer, PeerError, UnsupportedError, resolve_test_dir, write_peer_json
from protocol.version import VERSION
from worker.drivers import parse_endpoint
from worker.drivers.base import DriverError
from worker.fail_conditions import FailConditions
from worker.latency import LatencyRecorder
from worker.processes import MultiProcessReceiver, MultiProcessSender
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun

__all__ = ["Worker", "main"]

log = logging.getLogger(__name__)

_STATS_INTERVAL_S = 1.0
_RATE_JUDGED_AFTER_S = 5.0

# What a worker runs: sending in one process or several, or receiving.
Run = SenderRun | MultiProcessSender | ReceiverRun
SENDING = (SenderRun, MultiProcessSender)


@dataclass
class SelfMonitor:
    """The worker's own CPU use and event-loop lag over a run, one sample a second."""

    samples: int = 0
    cpu_percent_sum: float = 0.0
    cpu_percent_max: float = 0.0
    loop_lag_ms_max: float = 0.0

    def add(self, cpu_percent: float, loop_lag_ms: float) -> None:
        self.samples += 1
        self.cpu_percent_sum += cpu_percent
        self.cpu_percent_max = max(self.cpu_percent_max, cpu_percent)
        self.loop_lag_ms_max = max(self.loop_lag_ms_max, loop_lag_ms)

    def summary(self) -> dict[str, float]:
        mean = self.cpu_percent_sum / self.samples if self.samples else 0.0
        return {
            "cpu_percent_mean": round(mean, 1),
            "cpu_percent_max": round(self.cpu_percent_max, 1),
            "loop_lag_ms_max": round(self.loop_lag_ms_max, 2),
            "samples": self.samples,
        }


@dataclass
class _Watch:
    """The fail conditions applied to one run, with what they remember between intervals."""

    conditions: FailConditions
    started: float  # monotonic, when the worker started
    origin: float  # monotonic, when load starts
    options: dict[str, Any]
    last_count: int = 0
    last_progress: float = 0.0
    count_at_warm_up: int | None = None

    def check(self, run: Run, now: float) -> str | None:
        c = self.conditions
        sending = isinstance(run, SENDING)
        count = run.stats.received if isinstance(run, ReceiverRun) else run.stats.sent
        # A paused receiver is idle on purpose: its stall clock starts again when it resumes.
        paused = isinstance(run, ReceiverRun) and run.paused
        if not self.last_progress:
            self.last_progress = max(now, self.origin)
        elif count != self.last_count or paused:
            self.last_count, self.last_progress = count, now
        if reason := c.stalled(now - self.last_progress, "sent" if sending else "received"):
            return reason
        warm_up_end = self.origin + self.options.get("warm_up_s", 0.0)
        if now < warm_up_end:
            return None
        if isinstance(run, ReceiverRun):
            return c.latency(run.last_interval.corrected) if run.last_interval else None
        if self.count_at_warm_up is None:
            self.count_at_warm_up = count
            return None
        # A few seconds in, so one slow second at the start does not decide the test.
        seconds = now - warm_up_end
        if seconds < _RATE_JUDGED_AFTER_S:
            return None
        warm_up_s = self.options.get("warm_up_s", 0.0)
        plan = run.plan
        expected_total, expected_warm = plan.expected_sent(now - self.origin), plan.expected_sent(warm_up_s)
        if expected_total is None or expected_warm is None:
            return None  # unbounded: no target to fall short of
        return c.rate(count - self.count_at_warm_up, seconds, (expected_total - expected_warm) / seconds)


class Worker(Peer):
    ASSIGNABLE_ROLES: ClassVar[frozenset[Role]] = frozenset({Role.SENDER, Role.RECEIVER})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.test_id = ""
        self._run: Run | None = None
        self._started_wall_ns = 0
        self.self_monitor = SelfMonitor()
        self._tripped: str | None = None  # the fail condition that ended the run

    # --- options --------------------------------------------------------------------------------

    def check_options(self, options: dict[str, Any]) -> None:
        """A bad SUT URL or driver option is refused at SET, before any load starts."""
        for name in ("send_url", "receive_url"):
            for url in options.get(name, []):
                parse_endpoint(url, name)
        profile = options.get("profile", ())
        if profile and max(step.parallel for step in profile) > options.get("parallel_count", 1):
            raise OptionError("profile", "a step asks for more clients than parallel_count opens")

    # --- notes ----------------------------------------------------------------------------------

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
            case StartTest():
                return self._on_start_test(note)
            case StartWorker():
                return await self._on_start_worker(note)
            case StopWorker() | StopTest():
                return self._on_stop()
            case DrainRequest():
                return self._on_drain(note)
            case PauseWorker():
                return await self._pause_or_resume(pause=True)
            case ResumeWorker():
                return await self._pause_or_resume(pause=False)
            case _:
                return await super().handle_role_note(note)

    def _on_start_test(self, note: StartTest) -> OkResponse:
        if self.state == "running":
            raise PeerError(f"busy with test {self.test_id}")
        self.test_id = note.test_id
        self.bus.publish(self.topics.notifications, TestStarted(test_id=note.test_id))
        return OkResponse()

    async def _on_start_worker(self, note: StartWorker) -> OkResponse:
        if self.role not in (Role.SENDER, Role.RECEIVER):
            raise PeerError("no role yet: a coordinator must send ROLE_ASSIGN first")
        if self.state == "running":
            raise PeerError(f"already running test {self.test_id}")
        test_id = self.test_id or self.options.get("test_id", "")
        if not test_id:
            raise PeerError("no test id: send START_TEST or SET test_id first")
        self.test_id = test_id
        directory = resolve_test_dir(self.config.data_dir, test_id) / self.role.value / self.config.name
        self._started_wall_ns = time.time_ns()
        self.self_monitor = SelfMonitor()
        self._tripped = None
        if self.role == Role.SENDER:
            run: Run = self._sender(directory, note.start_at_ns)
        else:
            run = self._receiver(directory)
            await run.start()  # consuming before OK: senders started after us lose nothing
        self._run = run
        self.state = "running"
        self.spawn(self._drive(run, directory))
        self.spawn(self._stream_stats(run))
        return OkResponse()

    def _urls(self, name: str) -> list[str]:
        urls: list[str] = self.options.get(name, [])
        if not urls:
            raise OptionError(name, f"a {self.role.value} needs it")
        return urls

    def _labels(self) -> dict[str, str]:
        return {"role": self.role.value, "peer": self.config.name, "host": self.config.host, "test": self.test_id}

    def _sender(self, directory: Path, start_at_ns: int) -> SenderRun | MultiProcessSender:
        o = self.options
        plan = SenderPlan(
            test_id=self.test_id,
            peer=f"{self.config.name}@{self.config.host}",
            urls=self._urls("send_url"),
            rate_per_s=o.get("rate_per_s", 0.0),
            parallel_count=o.get("parallel_count", 1),
            duration=o.get("duration", Duration(seconds=60.0)),
            size=o.get("message_size", MessageSize(256, 256)),
            poisson=o.get("arrivals") == "poisson",
            warm_up_s=o.get("warm_up_s", 0.0),
            start_jitter_s=o.get("start_jitter_s", 0.0),
            confirm_window=o.get("confirm_window", 0),
            precise_timing=o.get("precise_timing", False),
            reconnect_budget_s=o.get("reconnect_budget_s", 60.0),
            start_at_ns=start_at_ns,
            profile=o.get("profile", ()),
        )
        processes = o.get("processes", 1)
        if processes > 1:
            return MultiProcessSender(plan, processes, directory, self._labels())
        return SenderRun(plan, RateFileWriter(directory, "sender", self._labels()))

    def _receiver(self, directory: Path) -> ReceiverRun:
        o = self.options
        duration: Duration | None = o.get("duration")
        plan = ReceiverPlan(
            test_id=self.test_id,
            urls=self._urls("receive_url"),
            parallel_count=o.get("parallel_count", 1),
            processing_delay_s=o.get("processing_delay_ms", 0.0) / 1000,
            duration_s=duration.seconds if duration else None,
            reconnect_budget_s=o.get("reconnect_budget_s", 60.0),
        )
        processes = o.get("processes", 1)
        if processes > 1:
            return MultiProcessReceiver(plan, processes, directory, self._labels())
        return ReceiverRun(plan, RateFileWriter(directory, "receiver", self._labels()), LatencyRecorder(directory))

    def _on_stop(self) -> OkResponse:
        if self._run is not None:
            self._run.stop()
        return OkResponse()

    async def _pause_or_resume(self, pause: bool) -> OkResponse:
        run = self._receiving_run()
        try:
            await (run.pause() if pause else run.resume())
        except DriverError as exc:
            raise UnsupportedError(str(exc)) from exc
        return OkResponse()

    def _receiving_run(self) -> ReceiverRun:
        if not isinstance(self._run, ReceiverRun) or self.state != "running":
            raise PeerError("only a running receiver can pause, resume or drain")
        return self._run

    def _on_drain(self, note: DrainRequest) -> OkResponse:
        run = self._receiving_run()

        async def drain() -> None:
            drained = await run.drain(idle_s=run.plan.drain_idle_s, timeout_s=note.timeout_s)
            message = "drained" if drained else f"still receiving after {note.timeout_s:g} s"
            self.bus.publish(self.topics.notifications, DrainComplete(success=drained, message=message))
            run.stop()

        self.spawn(drain())
        return OkResponse()

    # --- the run --------------------------------------------------------------------------------

    async def _drive(self, run: Run, directory: Path) -> None:
        failure: str | None = None
        try:
            await run.run()
            failure = self._tripped or run.failure
        except Exception as exc:  # the notification below must go out whatever broke
            log.exception("run failed")
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            await run.close()
            self._write_peer_json(run, directory, failure)
            self.state = "idle"
        if failure:
            self.bus.publish(self.topics.notifications, TestFailed(test_id=self.test_id, message=failure))
        else:
            done = f"sent {run.stats.sent}" if isinstance(run, SENDING) else f"received {run.stats.received}"
            self.bus.publish(self.topics.notifications, TestSucceeded(test_id=self.test_id, message=done))

    async def _stream_stats(self, run: Run) -> None:
        """Once a second: the run's counters, plus how busy this process is, so a report can
        tell when the load generator, not the SUT, was the limit; and the fail conditions."""
        started = last_wall = time.monotonic()
        last_cpu = time.process_time()
        watch = _Watch(FailConditions.from_options(self.options), started, self._origin(run), self.options)
        while self._run is run and self.state == "running":
            await asyncio.sleep(_STATS_INTERVAL_S)
            now, cpu = time.monotonic(), time.process_time()
            # A loop that wakes late from a timed sleep is a loop too busy to keep a schedule.
            loop_lag_ms = max(0.0, (now - last_wall - _STATS_INTERVAL_S) * 1000)
            cpu_percent = 100 * (cpu - last_cpu) / max(now - last_wall, 1e-9)
            self.self_monitor.add(cpu_percent, loop_lag_ms)
            last_wall, last_cpu = now, cpu
            if self.state != "running":
                break
            counters = run.interval_report() | {"cpu_percent": cpu_percent, "loop_lag_ms": loop_lag_ms}
            report = StatsReport(test_id=self.test_id, elapsed_s=now - started, counters=counters)
            self.bus.publish(self.topics.maestro, report, qos=0)
            reason = watch.check(run, now)
            if reason and self._tripped is None:
                log.error("fail condition: %s", reason)
                self._tripped = reason
                if isinstance(run, ReceiverRun):
                    # Say so at once, but go on receiving until drained: what is in flight is
                    # counted as received, not as lost.
                    self.bus.publish(self.topics.notifications, TestFailed(test_id=self.test_id, message=reason))
                else:
                    run.stop()

    def _origin(self, run: Run) -> float:
        """The monotonic time the run's load starts (a sender's common start, else now)."""
        start_at_ns = run.plan.start_at_ns if isinstance(run, SENDING) else 0
        return time.monotonic() + max(0, start_at_ns - time.time_ns()) / 1e9

    def _write_peer_json(self, run: Run, directory: Path, failure: str | None) -> None:
        info: dict[str, Any] = {
            "name": self.config.name,
            "host": self.config.host,
            "peer_id": self.peer_id,
            "role": self.role.value,
            "test_id": self.test_id,
            "version": VERSION,
            "python": platform.python_version(),
            "pid": os.getpid(),
            "options": self.raw_options,
            "started_ns": self._started_wall_ns,
            "ended_ns": time.time_ns(),
            "failure": failure,
            "self_monitor": self.self_monitor.summary(),
            "files": run.files(),
        }
        if isinstance(run, SENDING):
            info["sent"] = run.stats.sent
            info["warm_up_end_ns"] = run.warm_up_end_ns
            info["warm_up_s"] = run.plan.warm_up_s
            info["errors"] = dict(run.stats.errors)
            info["retries"] = run.stats.retries
            info["disconnects_ns"] = run.stats.disconnects_ns
            info["reconnects_ns"] = sorted(run.stats.reconnects_ns)
            info["senders"] = {
                f"{key:016x}": {"client": client, "sent": run.stats.sent_per_client[client]}
                for client, key in run.keys.items()
            }
            lag = run.stats.lag_us
            info["schedule_lag_us"] = {p: lag.get_value_at_percentile(float(p)) for p in ("50", "99", "99.9")}
            info["schedule_lag_us"]["max"] = lag.get_max_value()
        else:
            info["received"] = run.stats.received
            info["foreign"] = dict(run.stats.foreign)
            info["latency_clamped"] = run.latency.clamped
            info["per_sender"] = run.per_sender()
            info["duplicates_per_s"] = {str(s): n for s, n in sorted(run.stats.duplicates_per_s.items())}
            info["reconnects_ns"] = run.reconnects_ns()
        write_peer_json(directory, info)

    def counters(self) -> dict[str, Any]:
        counters = super().counters()
        run = self._run
        if isinstance(run, SENDING):
            counters.update(sent=run.stats.sent, errors=dict(run.stats.errors))
        elif isinstance(run, ReceiverRun):
            counters.update(received=run.stats.received, foreign=dict(run.stats.foreign))
        return counters

    async def shutdown(self) -> None:
        if self._run is not None:
            self._run.stop()
        await super().shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("maestro-worker", "A Maestro sender or receiver daemon.")
    parser.add_argument(
        "--role",
        choices=[Role.SENDER.value, Role.RECEIVER.value],
        help="start as this role (default: none; wait for the coordinator to assign one)",
    )
    return run_daemon(Worker, parser, argv, lambda args: Role(args.role) if args.role else Role.OTHER)

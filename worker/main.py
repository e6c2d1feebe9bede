"""`maestro-worker`: a sender or receiver, given its role at start or later by ROLE_ASSIGN."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from protocol.codes import Activity, Role
from protocol.daemon_cli import daemon_parser, run_daemon
from protocol.failures import describe
from protocol.file_check import FileCheck, check_files
from protocol.json_value import JsonObject
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    Note,
    OkResponse,
    PauseWorker,
    ResumeWorker,
    StartWorker,
    StatsReport,
    StopTest,
    StopWorker,
    TestFailed,
    TestSucceeded,
)
from protocol.options import OptionError, TestOptions
from protocol.ratefile import RateFileWriter
from protocol.results import ReceiverAccount, SelfMonitorSummary, SenderAccount, write_peer_json
from protocol.runtime import Peer, PeerError, UnsupportedError
from worker.drivers import parse_endpoint
from worker.drivers.base import DriverError
from worker.latency import LatencyRecorder
from worker.payload import key_of
from worker.processes import MultiProcessReceiver, MultiProcessSender
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.requester import RequesterPlan, RequesterRun
from worker.run import Run, Watch
from worker.sender import SenderPlan, SenderRun

__all__ = ["Worker", "main"]

log = logging.getLogger(__name__)

_STATS_INTERVAL_S = 1.0
# A receiver whose coordinator is gone takes what is in flight for at most this long.
_DRAIN_AFTER_LOSS_S = 10.0

# What a worker runs: sending in one process or several, or receiving.


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

    def summary(self) -> SelfMonitorSummary:
        mean = self.cpu_percent_sum / self.samples if self.samples else 0.0
        return SelfMonitorSummary(
            cpu_percent_mean=round(mean, 1),
            cpu_percent_max=round(self.cpu_percent_max, 1),
            loop_lag_ms_max=round(self.loop_lag_ms_max, 2),
            samples=self.samples,
        )


class Worker(Peer):
    ASSIGNABLE_ROLES: ClassVar[frozenset[Role]] = frozenset({Role.SENDER, Role.RECEIVER})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._run: Run | None = None
        self._started_wall_ns = 0
        self.self_monitor = SelfMonitor()
        self._tripped: str | None = None  # the fail condition that ended the run

    # --- options --------------------------------------------------------------------------------

    def check_options(self, settings: TestOptions) -> None:
        """A bad SUT URL or driver option is refused at SET, before any load starts."""
        for name, urls in (("send_url", settings.send_url), ("receive_url", settings.receive_url)):
            for url in urls:
                parse_endpoint(url, name)
        profile = settings.profile
        if profile and max(step.parallel for step in profile) > settings.parallel_count:
            raise OptionError("profile", "a step asks for more clients than parallel_count opens")

    # --- notes ----------------------------------------------------------------------------------

    async def handle_role_note(self, note: Note) -> Note | None:
        match note:
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

    async def _on_start_worker(self, note: StartWorker) -> OkResponse:
        if self.role not in (Role.SENDER, Role.RECEIVER):
            raise PeerError("no role yet: a coordinator must send ROLE_ASSIGN first")
        if self.state == Activity.RUNNING:
            raise PeerError(f"already running test {self.test_id}")
        directory = self.test_dir()
        self._started_wall_ns = time.time_ns()
        self.self_monitor = SelfMonitor()
        self._tripped = None
        if self.role == Role.SENDER and self.settings.request_reply:
            run: Run = self._requester(directory, note)
        elif self.role == Role.SENDER:
            run = self._sender(directory, note.start_for(self.peer_id))
        else:
            run = self._receiver(directory, note.latency_shift_us.get(self.peer_id, 0))
            try:
                await run.start()  # consuming before OK: senders started after us lose nothing
            except Exception:
                await run.close()  # the consumers that did connect, and its hold on the frozen heap
                raise
        self._run = run
        self.state = Activity.RUNNING
        self.spawn(self._drive(run, directory))
        self.spawn(self._stream_stats(run))
        return OkResponse()

    def _urls(self, name: str) -> list[str]:
        urls: list[str] = list(getattr(self.settings, name))
        if not urls:
            raise OptionError(name, f"a {self.role.value} needs it")
        return urls

    def _labels(self) -> dict[str, str]:
        return {"role": self.role.value, "peer": self.config.name, "host": self.config.host, "test": self.test_id}

    def _sender(self, directory: Path, start_at_ns: int) -> SenderRun | MultiProcessSender:
        o = self.settings
        plan = SenderPlan(
            test_id=self.test_id,
            peer=f"{self.config.name}@{self.config.host}",
            urls=self._urls("send_url"),
            rate_per_s=o.rate_per_s,
            parallel_count=o.parallel_count,
            duration=o.duration,
            size=o.message_size,
            poisson=o.arrivals == "poisson",
            warm_up_s=o.warm_up_s,
            start_jitter_s=o.start_jitter_s,
            confirm_window=o.confirm_window,
            precise_timing=o.precise_timing,
            reconnect_budget_s=o.reconnect_budget_s,
            start_at_ns=start_at_ns,
            profile=o.profile,
        )
        processes = o.processes
        if processes > 1:
            return MultiProcessSender(plan, processes, directory, self._labels())
        return SenderRun(plan, RateFileWriter(directory, "sender", self._labels()))

    def _requester(self, directory: Path, note: StartWorker) -> RequesterRun:
        o = self.settings
        if o.processes > 1:
            raise OptionError("processes", "request/reply runs its clients in one process for now")
        plan = RequesterPlan(
            test_id=self.test_id,
            peer=f"{self.config.name}@{self.config.host}",
            urls=self._urls("send_url"),
            parallel_count=o.parallel_count,
            duration=o.duration,
            size=o.message_size,
            outstanding=o.outstanding,
            think_time=o.think_time,
            request_timeout_s=o.request_timeout_s,
            warm_up_s=o.warm_up_s,
            start_at_ns=note.start_for(self.peer_id),
            reconnect_budget_s=o.reconnect_budget_s,
            clock_offsets_ns={key_of(peer): offset for peer, offset in note.clock_offsets_ns.items()},
            own_offset_ns=note.clock_offsets_ns.get(self.peer_id, 0),
        )
        return RequesterRun(plan, RateFileWriter(directory, "sender", self._labels()), directory)

    def _receiver(self, directory: Path, latency_shift_us: int) -> ReceiverRun:
        o = self.settings
        plan = ReceiverPlan(
            test_id=self.test_id,
            urls=self._urls("receive_url"),
            parallel_count=o.parallel_count,
            processing_delay_s=o.processing_delay_ms / 1000,
            # A receiver told no duration runs until drained (a count is the senders' to keep).
            duration_s=o.duration_s if "duration" in self.given else None,
            reconnect_budget_s=o.reconnect_budget_s,
            latency_shift_us=latency_shift_us,
            reply=o.request_reply,
            service_time=o.service_time,
            replier_key=key_of(self.peer_id),
        )
        processes = o.processes
        if processes > 1 and o.request_reply:
            raise OptionError("processes", "request/reply runs its clients in one process for now")
        if processes > 1:
            return MultiProcessReceiver(plan, processes, directory, self._labels())
        return ReceiverRun(
            plan,
            RateFileWriter(directory, "receiver", self._labels()),
            LatencyRecorder(directory, shift_us=latency_shift_us),
        )

    async def coordinator_lost(self) -> None:
        run = self._run
        if run is None or self.state != Activity.RUNNING:
            return
        self._tripped = self._tripped or "stopped: the coordinator was lost (its files wait for `maestro collect`)"
        if isinstance(run, ReceiverRun):
            # What the senders sent before they stopped is still on its way: take it, briefly.
            await run.drain(idle_s=run.plan.drain_idle_s, timeout_s=_DRAIN_AFTER_LOSS_S)
        run.stop()

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
        if not isinstance(self._run, ReceiverRun) or self.state != Activity.RUNNING:
            raise PeerError("only a running receiver can pause, resume or drain")
        return self._run

    def _on_drain(self, note: DrainRequest) -> OkResponse:
        run = self._receiving_run()

        async def drain() -> None:
            drained = await run.drain(idle_s=run.plan.drain_idle_s, timeout_s=note.timeout_s)
            message = "drained" if drained else run.why_undrained(note.timeout_s)
            self.bus.publish(self.topics.notifications, DrainComplete(success=drained, message=message))
            if note.stop:
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
            failure = describe(exc)
        finally:
            await run.close()
            # Off the loop: a long run's files take a second or so to read through.
            checks = await asyncio.to_thread(check_files, directory, run.files())
            self._write_peer_json(run, directory, failure, checks)
            self.state = Activity.IDLE
        if failure:
            self.bus.publish(self.topics.notifications, TestFailed(test_id=self.test_id, message=failure))
        else:
            done = f"{run.VERB} {run.count()}"
            self.bus.publish(self.topics.notifications, TestSucceeded(test_id=self.test_id, message=done))

    async def _stream_stats(self, run: Run) -> None:
        """Once a second: the run's counters, plus how busy this process is, so a report can
        tell when the load generator, not the SUT, was the limit; and the fail conditions."""
        started = last_wall = time.monotonic()
        last_cpu = time.process_time()
        watch = Watch(self.settings.fail, self._origin(run), self.settings.warm_up_s)
        while self._run is run and self.state == Activity.RUNNING:
            await asyncio.sleep(_STATS_INTERVAL_S)
            now, cpu = time.monotonic(), time.process_time()
            # A loop that wakes late from a timed sleep is a loop too busy to keep a schedule.
            loop_lag_ms = max(0.0, (now - last_wall - _STATS_INTERVAL_S) * 1000)
            cpu_percent = 100 * (cpu - last_cpu) / max(now - last_wall, 1e-9)
            self.self_monitor.add(cpu_percent, loop_lag_ms)
            last_wall, last_cpu = now, cpu
            if self.state != Activity.RUNNING:
                break
            counters = replace(run.interval_report(), cpu_percent=cpu_percent, loop_lag_ms=loop_lag_ms)
            report = StatsReport(test_id=self.test_id, elapsed_s=now - started, counters=counters.to_json())
            self.bus.publish(self.topics.maestro, report, qos=0)
            reason = watch.check(run, now)
            if reason and self._tripped is None:
                log.error("fail condition: %s", reason)
                self._tripped = reason
                if run.STOPS_WHEN_TRIPPED:
                    run.stop()
                else:
                    # Say so at once, but go on receiving until drained: what is in flight is
                    # counted as received, not as lost.
                    self.bus.publish(self.topics.notifications, TestFailed(test_id=self.test_id, message=reason))

    def _origin(self, run: Run) -> float:
        """The monotonic time the run's load starts (a sender's common start, else now)."""
        return time.monotonic() + max(0, run.start_at_ns() - time.time_ns()) / 1e9

    def _write_peer_json(self, run: Run, directory: Path, failure: str | None, checks: dict[str, FileCheck]) -> None:
        account = run.account()
        record = replace(
            self.peer_record(),
            python=platform.python_version(),
            pid=os.getpid(),
            started_ns=self._started_wall_ns,
            ended_ns=time.time_ns(),
            failure=failure,
            self_monitor=self.self_monitor.summary(),
            files=tuple(run.files()),
            checks=checks,
            sender=account if isinstance(account, SenderAccount) else None,
            receiver=account if isinstance(account, ReceiverAccount) else None,
            client_settings=self._client_settings(),
        )
        write_peer_json(directory, record)

    def _client_settings(self) -> dict[str, str] | None:
        """The library and settings of this worker's first client (the others differ in
        their number and, round robin, their node)."""
        sending = self.role != Role.RECEIVER
        urls = self._urls("send_url" if sending else "receive_url")
        if not urls:
            return None
        cls, endpoint = parse_endpoint(urls[0], "send_url" if sending else "receive_url")
        return cls(endpoint, 0).settings(sending)

    def counters(self) -> JsonObject:
        counters = super().counters()
        if self._run is not None:
            counters.update(self._run.counters())
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

"""Running a test: one lifecycle per load phase, and the executors built from it.

A phase: SET → clocks (PING) → START_TEST → receivers → inspectors and agents → senders at one
scheduled start → watch (progress, fail conditions, lost peers, Ctrl-C) → stop → drain →
clocks again → collect (LOG: every peer uploads to the data server) → figures → outcome,
test.json and junit.xml on the data server. Whatever ends the phase, the peers are stopped and
what they wrote is collected.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coordinator.definitions import Action, FixedRateTest, TestDefinition, to_dict
from coordinator.junit import junit_xml
from coordinator.maestro import MaestroError, PeerRequestError
from coordinator.progress import Progress
from coordinator.registry import PeerInfo
from protocol.codes import Role
from protocol.notes import (
    AgentAction,
    CommandFinished,
    DrainComplete,
    DrainRequest,
    LogRequest,
    StartAgent,
    StartInspector,
    StartTest,
    StartWorker,
    StatsReport,
    StopAgent,
    StopInspector,
    StopWorker,
    TestFailed,
    TestSucceeded,
    UploadComplete,
    UserCommand,
)
from protocol.secrets import redact, redact_text
from protocol.upload import UploadError, upload_bytes

if TYPE_CHECKING:
    from coordinator.maestro import Maestro

__all__ = ["FINISHED", "Cast", "TestResult", "new_test_id", "run_test"]

log = logging.getLogger(__name__)

# Senders get their START_WORKER this long before the common start, plus a few round trips.
_START_MARGIN_S = 1.0
# How long past its duration a sender may take to say it finished.
_FINISH_GRACE_S = 30.0
_COLLECT_TIMEOUT_S = 300.0
_PING_SAMPLES = 3


# Every test this process ran, in order: `maestro run` exits non-zero when one of them failed.
FINISHED: list[TestResult] = []


def new_test_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class TestResult:
    test_id: str
    outcome: str  # "success" | "failure"
    reason: str | None
    summary: dict[str, Any]
    record: dict[str, Any]  # what test.json holds
    data_server: str
    steps: list[TestResult] = field(default_factory=list)  # an incremental test's phases
    best: TestResult | None = None  # its highest passing step

    __test__ = False  # not a pytest class

    @property
    def passed(self) -> bool:
        return self.outcome == "success"

    @property
    def url(self) -> str:
        return f"{self.data_server}/api/results/{self.test_id}"

    def __str__(self) -> str:
        s = self.summary
        text = f"test {self.test_id}: {self.outcome}" + (f" ({self.reason})" if self.reason else "")
        if "sent" in s:
            lat = s.get("latency_us", {})
            send, receive = s["send_rate"]["mean"], s["receive_rate"]["mean"]
            text += (
                f"\n  sent {s['sent']:,}  received {s['received']:,}  lost {s['lost']:,}"
                f"  duplicates {s['duplicates']:,}"
                f"\n  send rate {send:,.1f} msg/s  receive rate {receive:,.1f} msg/s"
                f"\n  latency p50 {lat.get('p50', 0) / 1000:.3f} ms  p99 {lat.get('p99', 0) / 1000:.3f} ms"
                f"  max {lat.get('max', 0) / 1000:.3f} ms"
            )
        best = self.record.get("max_sustainable")
        if best:
            text += (
                f"\n  max sustainable: {best['rate_per_client']:g} msg/s per client x {best['parallel']} clients"
                f" (received {best['receive_rate'] or 0:,.1f} msg/s; {best['test_id']})"
            )
        for name, e in self.record.get("statistics", {}).items():
            text += f"\n  {name}: mean {e['mean']:,.1f}, 95% CI [{e['ci95'][0]:,.1f}, {e['ci95'][1]:,.1f}] (n={e['n']})"
        for row in self.record.get("comparison", []):
            point = ", ".join(f"{k}={v}" for k, v in row["point"].items())
            p99 = (row["latency_us"] or {}).get("p99", 0) / 1000
            text += f"\n  {point}: {row['outcome']}, {row['receive_rate'] or 0:,.1f} msg/s, p99 {p99:.3f} ms"
        return text


@dataclass
class Cast:
    """Who plays in a test: per flow its senders and receivers; inspectors and agents."""

    flows: list[tuple[list[PeerInfo], list[PeerInfo]]]
    inspectors: list[tuple[PeerInfo, str, str]]  # peer, inspector name, management URL
    agents: list[PeerInfo]

    @property
    def senders(self) -> list[PeerInfo]:
        return [p for senders, _ in self.flows for p in senders]

    @property
    def receivers(self) -> list[PeerInfo]:
        return [p for _, receivers in self.flows for p in receivers]

    @property
    def inspector_peers(self) -> list[PeerInfo]:
        return list({p.peer_id: p for p, _, _ in self.inspectors}.values())

    @property
    def everyone(self) -> list[PeerInfo]:
        return [*self.receivers, *self.senders, *self.inspector_peers, *self.agents]

    @classmethod
    def choose(cls, maestro: Maestro, test: FixedRateTest, timeout_s: float = 10.0) -> Cast:
        """Workers that have the role already, then idle workers given it (ROLE_ASSIGN)."""
        flows = test.all_flows()
        wanted_senders = sum(f.senders for f in flows)
        wanted_receivers = sum(f.receivers for f in flows)
        live = maestro.registry.live()
        pools = {role: [p for p in live if p.role == role] for role in (Role.SENDER, Role.RECEIVER, Role.OTHER)}
        missing_senders = max(0, wanted_senders - len(pools[Role.SENDER]))
        missing_receivers = max(0, wanted_receivers - len(pools[Role.RECEIVER]))
        if missing_senders + missing_receivers > len(pools[Role.OTHER]):
            raise MaestroError(
                f"the test needs {wanted_senders} senders and {wanted_receivers} receivers; live are "
                f"{len(pools[Role.SENDER])} senders, {len(pools[Role.RECEIVER])} receivers and "
                f"{len(pools[Role.OTHER])} role-less workers"
            )
        if missing_senders or missing_receivers:
            assigned = maestro.assign_roles(missing_senders, missing_receivers, timeout_s)
            pools[Role.SENDER] += assigned[Role.SENDER]
            pools[Role.RECEIVER] += assigned[Role.RECEIVER]
        cast_flows = []
        for flow in flows:
            senders = [pools[Role.SENDER].pop(0) for _ in range(flow.senders)]
            receivers = [pools[Role.RECEIVER].pop(0) for _ in range(flow.receivers)]
            cast_flows.append((senders, receivers))
        inspectors = []
        inspector_peers = [p for p in live if p.role == Role.INSPECTOR]
        for number, spec in enumerate(test.inspectors):
            name, _, url = spec.partition("=")
            if not inspector_peers:
                raise MaestroError(f"inspector {name}: no live inspector peer to run it")
            # Several inspectors share the inspector peers round robin (one peer can run several).
            inspectors.append((inspector_peers[number % len(inspector_peers)], name, url))
        names = dict.fromkeys([*test.agents, *(a.agent for a in test.actions)])
        agents = [maestro.find(name) for name in names]
        return cls(cast_flows, inspectors, agents)


def _clock_record(peer: PeerInfo) -> dict[str, float] | None:
    c = peer.clock
    if c is None:
        return None
    return {
        "offset_us": round(c.offset_us, 1),
        "uncertainty_us": round(c.uncertainty_us, 1),
        "rtt_us": round(c.rtt_us, 1),
    }


@dataclass
class Phase:
    """One run of load through the SUT, under one test id."""

    maestro: Maestro
    test: FixedRateTest
    test_id: str
    data_server: str
    cast: Cast
    show_progress: bool = True
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    collection: dict[str, str] = field(default_factory=dict)
    started_iso: str = ""
    ended_iso: str = ""
    failed_iso: str | None = None  # when the coordinator learnt the reason
    finished: set[str] = field(default_factory=set)  # peers whose run ended (success or failure)
    started_senders: set[str] = field(default_factory=set)  # senders that took their StartWorker
    events: list[dict[str, Any]] = field(default_factory=list)  # agents' actions, in order
    load_start_s: float = 0.0  # wall time (s) of the senders' common start

    def fail(self, reason: str) -> None:
        if self.reason is None:
            log.error("test %s fails: %s", self.test_id, reason)
            self.reason = reason
            self.failed_iso = now_iso()

    def run(self) -> TestResult:
        self.started_iso = now_iso()
        started = False
        try:
            self._prepare()
            started = True
            self._start()
            self._watch()
        except KeyboardInterrupt:
            self.fail("interrupted (Ctrl-C)")
        except MaestroError as exc:
            self.fail(str(exc))
        finally:
            # Each step on its own: a failure in one must not keep the peers running or their files.
            if started:
                self._guarded(self._stop_and_drain)
                self._guarded(lambda: self._ping("after"))
            self._guarded(self._collect)
            self.ended_iso = now_iso()
        return self._finish()

    def _guarded(self, step: Any) -> None:
        try:
            step()
        except KeyboardInterrupt:
            self.fail("interrupted (Ctrl-C)")
        except MaestroError as exc:
            self.fail(str(exc))

    # --- before -------------------------------------------------------------------------------

    def _live(self, peers: list[PeerInfo]) -> list[PeerInfo]:
        lost = {p.peer_id for p in self.maestro.lost}
        return [p for p in peers if p.peer_id not in lost]

    def _ids(self, peers: list[PeerInfo]) -> set[str]:
        return {p.peer_id for p in peers}

    def _prepare(self) -> None:
        m, t = self.maestro, self.test
        common = {"test_id": self.test_id, "data_server_url": self.data_server}
        for flow, (senders, receivers) in zip(t.all_flows(), self.cast.flows, strict=True):
            for peer in receivers:
                m.set(self._placed(common | t.receiver_options(flow)), to=peer)
            for peer in senders:
                m.set(self._placed(common | t.sender_options(flow)), to=peer)
        inspection = {k: v for k, v in t.options.items() if k.startswith("inspector")}
        inspection["fail_inspector_errors"] = t.fail.options()["fail_inspector_errors"]
        for peer in [*self.cast.inspector_peers, *self.cast.agents]:
            m.set(common | {"labels": t.labels} | inspection, to=peer)
        self._ping("before")
        note = StartTest(test_id=self.test_id, name=t.name, labels=t.labels)
        for peer in self.cast.everyone:
            m.request(note, to=peer)

    def _placed(self, options: dict[str, Any]) -> dict[str, Any]:
        """`{test_id}` in a SUT URL becomes this phase's id: a fresh queue or topic per phase."""
        for key in ("send_url", "receive_url"):
            if key in options:
                options[key] = [url.replace("{test_id}", self.test_id) for url in options[key]]
        return options

    def _ping(self, when: str) -> None:
        for peer in self._live(self.cast.everyone):
            peer.clock = None  # this phase's samples only
            self.maestro.ping(peer, samples=_PING_SAMPLES)
            self.clocks.setdefault(peer.peer_id, {})[when] = _clock_record(peer)

    def _start(self) -> None:
        m = self.maestro
        for peer in self.cast.receivers:
            m.request(StartWorker(), to=peer, timeout_s=60)  # answers once consuming
        for peer, name, url in self.cast.inspectors:
            m.request(StartInspector(inspector=name, url=url), to=peer)
        for peer in self.cast.agents:
            m.request(StartAgent(), to=peer)
        senders = self.cast.senders
        worst_rtt_s = max(((p.clock.rtt_us if p.clock else 0) for p in senders), default=0) / 1e6
        start_at = time.time_ns() + int((_START_MARGIN_S + len(senders) * 2 * worst_rtt_s) * 1e9)
        self.load_start_s = start_at / 1e9
        for peer in senders:
            # In the peer's own clock, so every sender starts at the same instant.
            offset_ns = int(peer.clock.offset_us * 1000) if peer.clock else 0
            m.request(StartWorker(start_at_ns=start_at + offset_ns), to=peer)
            self.started_senders.add(peer.peer_id)
        self.notes.append(f"senders start at {datetime.fromtimestamp(start_at / 1e9, UTC).isoformat()}")

    # --- during -------------------------------------------------------------------------------

    def _watch(self) -> None:
        m, t = self.maestro, self.test
        involved = self._ids(self.cast.everyone)
        pending = self._ids(self.cast.senders)
        expected = t.expected_seconds()
        deadline = None if expected is None else time.monotonic() + _START_MARGIN_S + expected + _FINISH_GRACE_S
        progress = Progress(expected, enabled=self.show_progress)
        m.live_stats.clear()
        due = sorted(t.actions, key=lambda a: a.at_s)
        while pending:
            while due and time.time() >= self.load_start_s + due[0].at_s:
                self._fire(due.pop(0))
            self._take_events()
            note = m.next_notification((TestSucceeded, TestFailed), involved, timeout_s=0.5, test_id=self.test_id)
            while m.live_stats:
                report = m.live_stats.popleft()
                if isinstance(report, StatsReport) and report.test_id == self.test_id:
                    progress.feed(report)
            progress.show()
            if lost := m.lost_among(involved):
                self.fail(f"peer lost: {', '.join(p.label for p in lost)} (abnormal disconnect)")
                break
            if isinstance(note, TestFailed):
                # A receiver says so as soon as a condition trips, and keeps receiving until
                # drained; a sender's failure is its end.
                if note.header.sender_id in pending:
                    self.finished.add(note.header.sender_id)
                self.fail(f"{self._label(note.header.sender_id)}: {note.message}")
                break
            if isinstance(note, TestSucceeded):
                self.finished.add(note.header.sender_id)
                pending.discard(note.header.sender_id)
            if deadline is not None and time.monotonic() > deadline:
                self.fail(f"the senders did not finish within {expected:g} s + {_FINISH_GRACE_S:g} s")
                break
        progress.done("senders done" if self.reason is None else f"stopping: {self.reason}")

    def _fire(self, action: Action) -> None:
        peer = next(p for p in self.cast.agents if p.name == action.agent)
        log.info("action at %g s: %s %s on %s", action.at_s, action.command, " ".join(action.args), action.agent)
        try:
            self.maestro.request(UserCommand(command=action.command, args=list(action.args)), to=peer)
        except PeerRequestError as exc:
            self.fail(f"action {action.command} at {action.at} refused: {exc}")

    def _take_events(self) -> None:
        """Agents' action starts and ends, and their handlers' results, for test.json."""
        ids = self._ids(self.cast.agents)
        while (note := self.maestro.next_notification((AgentAction, CommandFinished), ids, 0)) is not None:
            who = self._label(note.header.sender_id)
            if isinstance(note, AgentAction):
                self.events.append(
                    {"agent": who, "action": note.action, "phase": note.phase, "target": note.target}
                    | {"time": datetime.fromtimestamp(note.time_ns / 1e9, UTC).isoformat(), **note.detail}
                )
            elif isinstance(note, CommandFinished):
                self.events.append(
                    {"agent": who, "command": note.command, "exit_code": note.exit_code, "output": note.output_tail}
                )

    def _label(self, peer_id: str) -> str:
        peer = self.maestro.registry.get(peer_id)
        return f"{peer.name}@{peer.host}" if peer else peer_id

    # --- after --------------------------------------------------------------------------------

    def _stop_and_drain(self) -> None:
        m = self.maestro
        # Senders never started (the start failed before them) have nothing to stop or wait for.
        running_senders = [
            p
            for p in self._live(self.cast.senders)
            if p.peer_id in self.started_senders and p.peer_id not in self.finished
        ]
        for peer in running_senders:
            m.request(StopWorker(), to=peer)
        if running_senders:
            self._await_finish(running_senders, timeout_s=30)
        try:
            self._drain()
        finally:
            # Last, so the inspectors saw the drain too.
            for peer in self._live(self.cast.inspector_peers):
                self._quietly(StopInspector(), peer)
            for peer in self._live(self.cast.agents):
                self._quietly(StopAgent(), peer)

    def _drain(self) -> None:
        m = self.maestro
        drain_s = self.test.drain_timeout_s
        draining = []
        for peer in self._live(self.cast.receivers):
            if peer.peer_id in self.finished:
                continue
            try:
                m.request(DrainRequest(timeout_s=drain_s), to=peer)
                draining.append(peer)
            except PeerRequestError as exc:  # it ended already (its failure is on record)
                self.notes.append(str(exc))
        if not draining:
            return
        drained = m.wait_for((DrainComplete,), draining, timeout_s=drain_s + 15)
        for peer_id, note in drained.items():
            if isinstance(note, DrainComplete) and not note.success:
                self.fail(f"{self._label(peer_id)} did not drain: {note.message}")
        self._await_finish(draining, timeout_s=30)

    def _await_finish(self, peers: list[PeerInfo], timeout_s: float) -> None:
        done = self.maestro.wait_for((TestSucceeded, TestFailed), peers, timeout_s)
        for peer_id, note in done.items():
            self.finished.add(peer_id)
            if isinstance(note, TestFailed):
                self.fail(f"{self._label(peer_id)}: {note.message}")

    def _quietly(self, note: Any, peer: PeerInfo) -> None:
        try:
            self.maestro.request(note, to=peer)
        except PeerRequestError as exc:
            self.notes.append(str(exc))

    def _collect(self) -> None:
        """Every live peer uploads its files; the lost ones' are named as missing."""
        m = self.maestro
        for peer in self.cast.everyone:
            if peer not in self._live([peer]):
                self.collection[peer.label] = "lost: its files stay on its host, if any"
        peers = self._live(self.cast.everyone)
        asked = []
        for peer in peers:
            try:
                m.request(LogRequest(test_id=self.test_id, upload_url=self.data_server), to=peer)
                asked.append(peer)
            except PeerRequestError as exc:
                self.collection[peer.label] = f"refused: {exc}"
        try:
            done = m.wait_for((UploadComplete,), asked, timeout_s=_COLLECT_TIMEOUT_S)
        except MaestroError as exc:
            self.fail(f"collection: {exc}")
            return
        for peer_id, note in done.items():
            assert isinstance(note, UploadComplete)
            self.collection[self._label(peer_id)] = note.message
            if not note.success:
                self.fail(f"collection: {self._label(peer_id)}: {note.message}")

    # --- outcome ------------------------------------------------------------------------------

    def _finish(self) -> TestResult:
        self._take_events()
        summary = fetch_summary(self.data_server, self.test_id)
        if "error" not in summary:
            self._judge(summary)
        else:
            self.fail(f"no figures: {summary['error']}")
        outcome = "success" if self.reason is None else "failure"
        record = {
            "test_id": self.test_id,
            "name": self.test.name,
            "kind": self.test.KIND if self.test.rate else "unbounded",
            "definition": to_dict(self.test),
            "target_rate": self.test.target_rate(),
            "labels": self.test.labels,
            "started": self.started_iso,
            "ended": self.ended_iso,
            "outcome": outcome,
            "reason": self.reason,
            "failed_at": self.failed_iso,
            "peers": [
                {
                    "name": p.name,
                    "host": p.host,
                    "role": p.role.value,
                    "peer_id": p.peer_id,
                    "version": p.version,
                    "clock": self.clocks.get(p.peer_id, {}),
                    "lost": p not in self._live([p]),
                }
                for p in self.cast.everyone
            ],
            "collection": self.collection,
            "events": self.events,
            "notes": self.notes,
            "summary": summary,
        }
        result = TestResult(self.test_id, outcome, self.reason, summary, record, self.data_server)
        store_result(result, [result])
        return result

    def _judge(self, summary: dict[str, Any]) -> None:
        sent, lost = summary["sent"], summary["lost"]
        if sent == 0:
            self.fail("nothing was sent")
            return
        bound = self.test.fail.max_loss_ratio
        if lost / sent > bound:
            self.fail(f"lost {lost:,} of {sent:,} messages ({lost / sent:.3%}; bound {bound:.3%})")


def fetch_summary(data_server: str, test_id: str) -> dict[str, Any]:
    url = f"{data_server.rstrip('/')}/api/results/{test_id}/summary"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            figures: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return {"error": f"data server answered {exc.code}: {exc.read().decode(errors='replace')[:300]}"}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"error": f"data server at {data_server}: {getattr(exc, 'reason', exc)}"}
    figures.pop("outcome", None)
    figures.pop("reason", None)
    return figures


def store_result(result: TestResult, cases: list[TestResult]) -> None:
    """test.json and junit.xml beside the peers' folders on the data server."""
    # No password from any URL reaches the results (the data server publishes them over HTTP).
    record = json.dumps(redact(result.record), indent=2, sort_keys=True, default=str).encode()
    junit = redact_text(junit_xml(result, cases).decode()).encode()
    try:
        upload_bytes(result.data_server, result.test_id, "test.json", record, replace=True)
        upload_bytes(result.data_server, result.test_id, "junit.xml", junit, replace=True)
    except UploadError as exc:
        log.error("could not store test.json/junit.xml for %s: %s", result.test_id, exc)
        result.record.setdefault("notes", []).append(f"not stored on the data server: {exc}")


def run_test(
    maestro: Maestro, test: TestDefinition, data_server: str, test_id: str | None = None, progress: bool = True
) -> TestResult:
    test_id = test_id or new_test_id()
    if isinstance(test, FixedRateTest):
        result = Phase(maestro, test, test_id, data_server, Cast.choose(maestro, test), progress).run()
    else:
        from coordinator.series import run_series  # noqa: PLC0415 - series builds on this module

        result = run_series(maestro, test, data_server, test_id, progress)
    FINISHED.append(result)
    return result


def parent_record(test: TestDefinition, test_id: str, started: str, outcome: str, reason: str | None) -> dict[str, Any]:
    """test.json of a test made of several phases; each phase has its own beside it."""
    return {
        "test_id": test_id,
        "name": test.name,
        "kind": test.KIND,
        "definition": to_dict(test),
        "labels": test.labels,
        "started": started,
        "ended": now_iso(),
        "outcome": outcome,
        "reason": reason,
    }


def phase_row(result: TestResult) -> dict[str, Any]:
    """One phase in its parent's test.json."""
    d = result.record["definition"]
    return {
        "test_id": result.test_id,
        "rate_per_client": d["rate"],
        "parallel": d["parallel"],
        "target_rate": result.record["target_rate"],
        "outcome": result.outcome,
        "reason": result.reason,
        "send_rate": result.summary.get("send_rate", {}).get("mean"),
        "receive_rate": result.summary.get("receive_rate", {}).get("mean"),
        "latency_us": result.summary.get("latency_us"),
        "lost": result.summary.get("lost"),
    }

"""The peer runtime: the daemon skeleton every role shares.

It connects to the control broker, subscribes to the peer's topics, decodes notes, dispatches
them to handlers one at a time in arrival order (so SET lands before START), and answers
OK / INTERNAL_ERROR / PROTOCOL_ERROR. A role subclasses `Peer` and handles its own commands in
`handle_role_note`; long work is started as a task there, never awaited, so PING and HALT are
answered while it runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from protocol.broker_url import BrokerUrl
from protocol.bus import ConnectFailedError, ControlBus, Identity
from protocol.clock_probe import start_responder
from protocol.codec import DEFAULT_MAX_NOTE_BYTES, ProtocolError
from protocol.codes import Activity, ErrorCode, NoteType, Role
from protocol.concurrency import call_in_loop
from protocol.failures import describe
from protocol.json_value import JsonObject
from protocol.memory import trim_forever
from protocol.notes import (
    DrainRequest,
    GetRequest,
    GetResponse,
    Halt,
    InternalErrorResponse,
    LogRequest,
    Note,
    OkResponse,
    PauseWorker,
    PeerOnline,
    PingRequest,
    PingResponse,
    ProtocolErrorResponse,
    ResumeWorker,
    RoleAssign,
    RoleUnassign,
    SetRequest,
    StartAgent,
    StartInspector,
    StartTest,
    StartWorker,
    StatsRequest,
    StatsResponse,
    StopAgent,
    StopInspector,
    StopTest,
    StopWorker,
    UploadComplete,
    UserCommand,
)
from protocol.options import OptionError, TestOptions, parse_options
from protocol.presence import GRACE_S, CoordinatorWatch
from protocol.results import PeerRecord
from protocol.secrets import redact
from protocol.signing import NoteKey
from protocol.topics import DEFAULT_PREFIX, Topics, check_topic_word
from protocol.upload import upload_with_retries
from protocol.version import VERSION

__all__ = [
    "Peer",
    "PeerConfig",
    "PeerError",
    "UnsupportedError",
    "resolve_test_dir",
    "starts_afresh",
]

log = logging.getLogger(__name__)

# Remembered request ids, so a QoS 1 redelivery is not acted on twice.
_SEEN_REQUESTS = 1024
_ACTS_ON_A_TEST = (
    StartWorker,
    StopWorker,
    StopTest,
    StartInspector,
    StopInspector,
    StartAgent,
    StopAgent,
    UserCommand,
    DrainRequest,
    PauseWorker,
    ResumeWorker,
)


def resolve_test_dir(data_dir: Path, test_id: str) -> Path:
    """Where a test's files live under a data dir; a test id that would leave it is refused."""
    try:
        check_topic_word(test_id, "test id")
    except ValueError as exc:
        raise PeerError(str(exc)) from exc
    if test_id.startswith("."):
        raise PeerError(f"test id {test_id!r} may not start with a dot")
    return data_dir / test_id


def starts_afresh(options_test: str, taken: bool, named: str) -> bool:
    """Whether a SET naming test `named` ("" when it names none) starts from the daemon's
    defaults instead of adding to the options set so far, which are for test `options_test` ("" if
    unknown yet) and were `taken` by a START_TEST. Options never carry over from one test to the
    next: a daemon kept for months would otherwise run each test with every earlier test's
    settings under its own (issue #34: a fixed-rate test after a request/reply one ran as
    request/reply). Several SETs for one test add up; the coordinator sends them before START_TEST."""
    if named and options_test and named != options_test:
        return True  # another test's
    return taken and named != options_test  # a test ran on these: this SET is for the next one


class PeerError(Exception):
    """A request cannot be done; answered as INTERNAL_ERROR with `code`."""

    code = ErrorCode.FAILED


class UnsupportedError(PeerError):
    code = ErrorCode.UNSUPPORTED


@dataclass
class PeerConfig:
    broker_url: str
    name: str
    role: Role
    data_dir: Path = field(default_factory=lambda: Path("maestro-data"))
    host: str = field(default_factory=socket.gethostname)
    topic_prefix: str = DEFAULT_PREFIX
    max_note_bytes: int = DEFAULT_MAX_NOTE_BYTES
    connect_timeout_s: float = 30.0
    coordinator_grace_s: float = GRACE_S
    # With a key, every note must come signed with it (protocol.signing).
    key: NoteKey | None = None
    # Clock probes (protocol.clock_probe): the UDP port (0: any free one), and addresses to
    # advertise besides the one this peer reaches the control broker from (a NAT's, say).
    clock_port: int = 0
    clock_hosts: tuple[str, ...] = ()
    upload_token: str | None = field(default=None, repr=False)  # the data server's, for writes

    def __post_init__(self) -> None:
        check_topic_word(self.name, "peer name")
        check_topic_word(self.host, "host name")


class Peer:
    """One daemon on the control bus. Subclasses set the class attributes and role handlers."""

    # Roles a coordinator may give this daemon with ROLE_ASSIGN (workers only).
    ASSIGNABLE_ROLES: ClassVar[frozenset[Role]] = frozenset()
    # Inspectors and agents follow the test's notifications; workers need not.
    LISTENS_TO_NOTIFICATIONS: ClassVar[bool] = False

    def __init__(self, config: PeerConfig) -> None:
        self.config = config
        self.role = config.role
        self.state = Activity.IDLE
        # This test's options: typed, with the defaults filled in (what the peer acts on), and as
        # SET gave them with passwords redacted (what it shows: peer.json, STATS, GET).
        self.settings = TestOptions()
        self.given: JsonObject = {}
        self._parsed: dict[str, object] = {}  # what `settings` is made from, as SETs add up
        self._options_test = ""  # the test the options are for (see `starts_afresh`)
        self._options_taken = False  # a START_TEST took them
        self.topics = Topics(config.topic_prefix)
        self.bus = ControlBus(
            BrokerUrl.parse(config.broker_url),
            Identity.new(config.name, config.host, config.role.value),
            self.topics,
            max_note_bytes=config.max_note_bytes,
            key=config.key,
            require_signed=config.key is not None,
            # Notes taken, remembered across a restart of this daemon (protocol.signing).
            seen_file=config.data_dir / ".maestro" / f"seen-notes-{config.name}",
        )
        # The coordinator's clock against ours, read from its signed PINGs, judges its notes' stamps.
        self._offsets: dict[str, int] = {}
        self.bus.guard.offset_of = self._offsets.get
        self.bus.guard.bound_test = self._bound_test
        self._inbox: asyncio.Queue[tuple[str, Note | ProtocolError]] = asyncio.Queue()
        self._stopping = asyncio.Event()
        # Requests answered (or being answered), with the answer: a request seen again (a QoS 1
        # redelivery, or the coordinator asking again after a lost answer) gets the same answer,
        # and is never acted on twice.
        self._seen: OrderedDict[str, Note | None] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.coordinator = CoordinatorWatch(self.bus, config.coordinator_grace_s)
        self.protocol_errors = 0
        self.clock_port = 0  # where the clock responder listens, once started
        self._clock: asyncio.DatagramTransport | None = None

    @property
    def peer_id(self) -> str:
        return self.bus.identity.peer_id

    @property
    def test_id(self) -> str:
        """The test START_TEST (or SET test_id) named; what this peer's notes are sealed for."""
        return self.bus.test_id

    @test_id.setter
    def test_id(self, test_id: str) -> None:
        self.bus.test_id = test_id

    def _bound_test(self, note: Note) -> str | None:
        """While a test runs, an order that acts on a test must be signed for this one (a copy of
        one for an earlier test is refused); one sealed for no test is a hand-driven session's."""
        if self.state == Activity.RUNNING and isinstance(note, _ACTS_ON_A_TEST) and self.test_id:
            return self.test_id
        return None

    # --- life cycle ---------------------------------------------------------------------------

    async def run(self) -> int:
        """Serve until HALT or SIGTERM; the exit code for the process."""
        loop = asyncio.get_running_loop()
        self.bus.on_note = lambda topic, note: call_in_loop(loop, self._inbox.put_nowait, (topic, note))
        self.bus.on_bad_note = lambda topic, err: call_in_loop(loop, self._inbox.put_nowait, (topic, err))
        self.bus.on_connected = self._announce
        self.bus.subscribe(self._subscriptions())
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, sig.name)
        try:
            self._clock, self.clock_port = await start_responder(
                self.peer_id, port=self.config.clock_port, key=self.config.key
            )
        except OSError as exc:
            log.error("cannot answer clock probes on UDP port %d: %s", self.config.clock_port, exc)
            return 1
        try:
            await self.startup()
        except PeerError as exc:
            log.error("%s", exc)
            await self.shutdown()
            self._clock.close()
            return 1
        try:
            await asyncio.to_thread(self.bus.connect, self.config.connect_timeout_s)
        except ConnectFailedError as exc:
            log.error("%s", exc)
            self._clock.close()
            return 1
        keyed = ", taking only notes signed with its key" if self.config.key else ""
        log.info("%s %s (%s) is up on %s%s", self.role.value, self.config.name, self.peer_id, self.bus.url, keyed)
        if self.config.key is None and not self.bus.url.on_loopback():
            log.warning(
                "!!! NO KEY: this %s obeys every note on %s, whoever publishes it: anyone who can reach the "
                "broker can make it send load anywhere, run commands or stop. Give it a cluster key "
                "(`maestro keygen`, then --key-file or $MAESTRO_KEY_FILE) !!!",
                self.role.value,
                self.bus.url,
            )
        dispatcher = asyncio.create_task(self._dispatch_forever())
        watcher = asyncio.create_task(self._watch_coordinator())
        trimmer = asyncio.create_task(trim_forever())
        await self._stopping.wait()
        for task in (dispatcher, watcher, trimmer):
            task.cancel()
        await self.shutdown()
        self.bus.close()
        self._clock.close()
        log.info("%s %s stopped", self.role.value, self.config.name)
        return 0

    async def startup(self) -> None:
        """What the role needs before it joins the cluster; a PeerError ends the daemon (exit 1)."""

    def stop(self, why: str = "") -> None:
        if not self._stopping.is_set():
            log.info("stopping%s", f" ({why})" if why else "")
            self._stopping.set()

    async def shutdown(self) -> None:
        """Undo what the role started (runs before the clean disconnect); subclasses stop their
        work, then call this to let the tasks end (an upload in progress, a final notification)."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)

    def spawn(self, coro: Any) -> None:
        """Long work, so the dispatcher goes on answering notes (PING, HALT) meanwhile."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Else it would vanish until garbage collection, and with it the reason a note went unanswered.
            log.error("background work failed", exc_info=exc)

    def _subscriptions(self) -> list[str]:
        t = self.topics
        topics = [t.everyone, t.coordinator, t.by_id(self.peer_id), t.by_name(self.config.host, self.config.name)]
        if self.role.is_worker:
            topics.append(t.workers)
        if self.role not in (Role.OTHER,):
            topics.append(t.by_role(self.role))
        if self.LISTENS_TO_NOTIFICATIONS:
            topics.append(t.notifications)
        return topics

    def _announce(self) -> None:
        # Runs on the MQTT thread after every (re)connect: the coordinator learns of us at once.
        self.bus.publish(
            self.topics.notifications,
            PeerOnline(version=VERSION, clock_port=self.clock_port, clock_hosts=self._clock_hosts()),
        )

    def _clock_hosts(self) -> list[str]:
        """Where the coordinator may reach the clock responder: the addresses configured, then
        the one this peer reaches the control broker from."""
        found = [*self.config.clock_hosts, self.bus.local_address()]
        return [h for h in dict.fromkeys(found) if h]

    # --- dispatch -----------------------------------------------------------------------------

    async def _dispatch_forever(self) -> None:
        while True:
            topic, item = await self._inbox.get()
            try:
                await self._dispatch(topic, item)
            except Exception:
                log.exception("failed to answer a note on %s", topic)

    async def _watch_coordinator(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if self.coordinator.lost():
                log.warning("the coordinator of test %s is gone: stopping its work, keeping its files", self.test_id)
                try:
                    await self.coordinator_lost()
                except Exception:
                    log.exception("stopping after the coordinator's loss failed")

    async def _dispatch(self, topic: str, item: Note | ProtocolError) -> None:
        if topic == self.topics.coordinator:
            if isinstance(item, Note):
                self.coordinator.heard(item)
            return
        from_notifications = topic == self.topics.notifications
        if isinstance(item, ProtocolError):
            self.protocol_errors += 1  # logged by the bus, at most once a minute per sender
            if not from_notifications:
                self.bus.reply_to_id(item.correlation_id, ProtocolErrorResponse(reason=item.reason))
            return
        note = item
        if from_notifications:
            if note.header.sender_id != self.peer_id:
                await self.handle_notification(note)
            return
        self.coordinator.heard(note)
        if isinstance(note, StartTest | StartWorker | StartInspector | StartAgent):
            self.coordinator.started_by(note.header.sender_id)
        if note.TYPE != NoteType.REQUEST:
            self.protocol_errors += 1
            reason = f"{type(note).__name__} is a {note.TYPE.name.lower()}, not a request"
            self.bus.reply(note, ProtocolErrorResponse(reason=reason))
            return
        message_id = note.header.message_id
        if message_id in self._seen:
            if (answered := self._seen[message_id]) is not None:
                self.bus.reply(note, answered)
            return
        self._remember(message_id, None)
        response = await self._answer(note)
        if response is not None:
            self._remember(message_id, response)
            self.bus.reply(note, response)
        if isinstance(note, Halt):
            self.stop("HALT")

    def _remember(self, message_id: str, response: Note | None) -> None:
        self._seen[message_id] = response
        if len(self._seen) > _SEEN_REQUESTS:
            self._seen.popitem(last=False)

    async def _answer(self, note: Note) -> Note | None:
        try:
            return await self.handle(note)
        except OptionError as exc:
            return InternalErrorResponse(code=ErrorCode.INVALID_OPTION, message=str(exc))
        except PeerError as exc:
            return InternalErrorResponse(code=exc.code, message=str(exc))
        except Exception as exc:
            log.exception("%s failed", type(note).__name__)
            return InternalErrorResponse(code=ErrorCode.FAILED, message=describe(exc))

    async def handle(self, note: Note) -> Note | None:
        match note:
            case PingRequest():
                return self._on_ping(note)
            case SetRequest():
                return self._on_set(note)
            case StatsRequest():
                return self._on_stats()
            case GetRequest():
                return self._on_get(note)
            case Halt():
                return OkResponse()
            case RoleAssign():
                return self._on_role_assign(note)
            case RoleUnassign():
                return self._on_role_unassign()
            case LogRequest():
                return self._on_log(note)
            case StartTest():
                return self._on_start_test(note)
            case _:
                return await self.handle_role_note(note)

    # --- role hooks ---------------------------------------------------------------------------

    async def handle_role_note(self, note: Note) -> Note | None:
        raise UnsupportedError(f"a {self.role.value} does not handle {type(note).__name__}")

    async def handle_notification(self, note: Note) -> None:
        """Another peer's notification (only with LISTENS_TO_NOTIFICATIONS)."""

    async def coordinator_lost(self) -> None:
        """The coordinator of the running test is gone for good: stop its work, keep its files."""

    def test_started(self) -> None:
        """A role's own reset when START_TEST names a new test."""

    def check_options(self, settings: TestOptions) -> None:
        """Role-specific checks of parsed options; raise OptionError to refuse the SET."""

    def counters(self) -> JsonObject:
        return {"protocol_errors": self.protocol_errors}

    # --- the test ------------------------------------------------------------------------------

    def current_test_id(self) -> str:
        """The test START_TEST named, else the one SET gave; a PeerError when neither did."""
        test_id = self.test_id or self.settings.test_id
        if not test_id:
            raise PeerError("no test id: send START_TEST or SET test_id first")
        self.test_id = test_id
        return test_id

    def test_dir(self) -> Path:
        """Where this peer writes the current test's files: <data dir>/<test id>/<role>/<name>."""
        return resolve_test_dir(self.config.data_dir, self.current_test_id()) / self.role.value / self.config.name

    def peer_record(self) -> PeerRecord:
        """What every peer.json starts with; a role adds its run and its account."""
        return PeerRecord(
            name=self.config.name,
            role=self.role.value,
            host=self.config.host,
            peer_id=self.peer_id,
            test_id=self.test_id,
            version=VERSION,
            options=self.given,  # this test's, as SET gave them (passwords redacted)
        )

    def _on_start_test(self, note: StartTest) -> OkResponse:
        if self.state == Activity.RUNNING:
            raise PeerError(f"busy with test {self.test_id}")
        self.test_id = note.test_id
        self._options_test, self._options_taken = note.test_id, True
        self.test_started()
        return OkResponse()

    # --- shared handlers ----------------------------------------------------------------------

    def _on_ping(self, note: PingRequest) -> PingResponse:
        # Its clock minus ours, less the one-way delay through the broker: close enough to judge
        # a stamp against a window of a minute.
        self._offsets[note.header.sender_id] = note.coordinator_time_ns - time.time_ns()
        return PingResponse(
            coordinator_time_ns=note.coordinator_time_ns,
            peer_time_ns=time.time_ns(),
            version=VERSION,
            pid=os.getpid(),
            state=self.state,
            test_id=self.settings.test_id,
            clock_port=self.clock_port,
            clock_hosts=self._clock_hosts(),
            signed_only=self.config.key is not None,
        )

    def _on_set(self, note: SetRequest) -> OkResponse:
        parsed = parse_options(note.options)
        named = str(parsed.get("test_id") or "")
        afresh = starts_afresh(self._options_test, self._options_taken, named)
        if afresh and self.state == Activity.RUNNING:
            raise PeerError(f"busy with test {self.test_id}: options for another test wait until it ends")
        options = ({} if afresh else self._parsed) | parsed
        settings = TestOptions.from_parsed(options)
        self.check_options(settings)
        self._parsed, self.settings = options, settings
        self.given = ({} if afresh else self.given) | redact(note.options)
        if afresh:  # the next START_TEST names the test
            self.test_id, self._options_test, self._options_taken = "", named, False
        elif named:
            self._options_test = named
        log.info("options set%s: %s", " from the defaults" if afresh else "", ", ".join(sorted(note.options)))
        return OkResponse()

    def _on_stats(self) -> StatsResponse:
        return StatsResponse(
            state=self.state,
            test_id=self.settings.test_id,
            counters=self.counters(),
            options=self.given,
        )

    def _on_get(self, note: GetRequest) -> GetResponse:
        answers: JsonObject = {
            "version": VERSION,
            "options": self.given,
            "data_dir": str(self.config.data_dir),
            "role": self.role.value,
        }
        if note.what not in answers:
            raise PeerError(f"GET knows {', '.join(sorted(answers))}; not {note.what!r}")
        return GetResponse(what=note.what, value=answers[note.what])

    def _on_log(self, note: LogRequest) -> OkResponse:
        """Upload this peer's files of a test; UPLOAD_COMPLETE follows once the server confirmed
        them (each local copy is deleted only then)."""
        url = note.upload_url or self.settings.data_server_url
        if not url:
            raise PeerError("no data server: send LOG with upload_url, or SET data_server_url")
        test_dir = resolve_test_dir(self.config.data_dir, note.test_id)
        trees = [(d / self.config.name, PurePosixPath(d.name, self.config.name)) for d in sorted(test_dir.glob("*"))]
        if self.state == Activity.RUNNING and note.test_id == self.settings.test_id:
            raise PeerError(f"test {note.test_id} is still running here: stop it first")

        budget_s = self.settings.upload_retry_s

        async def upload() -> None:
            try:
                report = await upload_with_retries(url, note.test_id, trees, budget_s, self.config.upload_token)
            except Exception as exc:  # the coordinator waits for the notification whatever broke
                log.exception("upload failed")
                done = UploadComplete(test_id=note.test_id, success=False, message=describe(exc))
            else:
                failed = "; ".join(f"{path}: {why}" for path, why in sorted(report.failed.items()))
                message = f"{len(report.uploaded)} files" + (
                    f", failed after {budget_s:g} s of retries (kept here for `maestro collect`): {failed}"
                    if failed
                    else ""
                )
                done = UploadComplete(
                    test_id=note.test_id, success=report.ok, uploaded=report.uploaded, message=message
                )
            # Sealed for the test collected, which may not be the one this peer was last given
            # (`maestro collect` of an earlier test): a keyed coordinator takes it only so.
            self.bus.publish(self.topics.notifications, done, test_id=note.test_id)

        self.spawn(upload())
        return OkResponse()

    def _on_role_assign(self, note: RoleAssign) -> OkResponse:
        try:
            role = Role(note.role)
        except ValueError as exc:
            raise PeerError(f"unknown role {note.role!r}") from exc
        if role not in self.ASSIGNABLE_ROLES:
            raise UnsupportedError(f"a {self.config.role.value} daemon cannot take the role {role.value}")
        if self.state != Activity.IDLE:
            raise PeerError(
                f"cannot change role while {self.state}",
            )
        self._set_role(role)
        return OkResponse()

    def _on_role_unassign(self) -> OkResponse:
        if not self.ASSIGNABLE_ROLES:
            raise UnsupportedError(f"a {self.role.value} keeps its role")
        if self.state != Activity.IDLE:
            raise PeerError(f"cannot drop the role while {self.state}")
        self._set_role(Role.OTHER)
        return OkResponse()

    def _set_role(self, role: Role) -> None:
        if self.role != Role.OTHER:
            self.bus.unsubscribe(self.topics.by_role(self.role))
        self.role = role
        self.bus.identity.role = role.value
        if role != Role.OTHER:
            self.bus.subscribe([self.topics.by_role(role)])
        log.info("role is now %s", role.value)

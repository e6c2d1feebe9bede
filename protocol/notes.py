"""One frozen dataclass per note. The codec turns them into bytes and back.

A note's payload is its dataclass fields (except `header`); the field types are the schema the
codec checks on decode. The registry maps (type, command) to exactly one class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from protocol.codes import PROTOCOL_VERSION, Command, ErrorCode, NoteType

__all__ = [
    "REGISTRY",
    "AbnormalDisconnect",
    "AgentAction",
    "AgentSource",
    "CommandFinished",
    "DrainComplete",
    "DrainRequest",
    "GetRequest",
    "GetResponse",
    "Halt",
    "Header",
    "InternalErrorResponse",
    "LogRequest",
    "Note",
    "OkResponse",
    "PauseWorker",
    "PeerOnline",
    "PingRequest",
    "PingResponse",
    "ProtocolErrorResponse",
    "ResumeWorker",
    "RoleAssign",
    "RoleUnassign",
    "SetRequest",
    "StartAgent",
    "StartInspector",
    "StartTest",
    "StartWorker",
    "StatsReport",
    "StatsRequest",
    "StatsResponse",
    "StopAgent",
    "StopInspector",
    "StopTest",
    "StopWorker",
    "TestFailed",
    "TestStarted",
    "TestSucceeded",
    "UserCommand",
    "note_class",
]


@dataclass(frozen=True)
class Header:
    """Who sent a note, when, and which request it answers."""

    message_id: str = ""
    sender_id: str = ""
    sender_name: str = ""
    sender_host: str = ""
    sender_role: str = ""
    # Wall clock of the sender (time.time_ns()); compared across hosts only with the
    # clock offset the coordinator measured.
    timestamp_ns: int = 0
    correlation_id: str | None = None
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, kw_only=True)
class Note:
    TYPE: ClassVar[NoteType]
    COMMAND: ClassVar[Command]
    # Notes named Test* are not pytest test classes.
    __test__: ClassVar[bool] = False

    header: Header = field(default_factory=Header, compare=False)

    def payload(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "header"}

    def with_header(self, header: Header) -> Note:
        return dataclasses.replace(self, header=header)


REGISTRY: dict[tuple[NoteType, Command], type[Note]] = {}

_N = TypeVar("_N", bound=type[Note])


def _register(cls: _N) -> _N:
    key = (cls.TYPE, cls.COMMAND)
    if key in REGISTRY:
        raise TypeError(f"{cls.__name__}: {key} is already taken by {REGISTRY[key].__name__}")
    REGISTRY[key] = cls
    return cls


def note_class(note_type: NoteType, command: Command) -> type[Note] | None:
    return REGISTRY.get((note_type, command))


# --- requests (coordinator -> peers) --------------------------------------------------------


@_register
@dataclass(frozen=True)
class StartWorker(Note):
    """Start the role's work (send or receive) with the options stored by SET.

    `start_at_ns`: a sender connects at once but sends its first message at this wall time, so
    all senders start together; 0 = at once. One note goes to every sender: each adds its own
    entry of `clock_offsets_ns` (peer id -> its clock minus the coordinator's, as measured by
    PING) to turn the coordinator's time into its own.

    `latency_shift_us`: receiver peer id -> what to add to its measured latencies where its
    senders run on other hosts (protocol.clock_correction, over the clocks measured before the
    load): the receiver adds it to each sample before recording it, so a latency that reads
    negative on a clock behind its senders' is never clamped first; its peer.json says what it
    added, and the reports correct the rest of the way by the clocks measured throughout."""

    TYPE = NoteType.REQUEST
    COMMAND = Command.START_WORKER
    worker: str = ""
    start_at_ns: int = 0
    clock_offsets_ns: dict[str, int] = field(default_factory=dict)
    latency_shift_us: dict[str, int] = field(default_factory=dict)

    def start_for(self, peer_id: str) -> int:
        """The common start in `peer_id`'s own clock (0: at once)."""
        return self.start_at_ns + self.clock_offsets_ns.get(peer_id, 0) if self.start_at_ns else 0


@_register
@dataclass(frozen=True)
class StopWorker(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.STOP_WORKER


@_register
@dataclass(frozen=True)
class StartTest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.START_TEST
    test_id: str
    name: str = ""
    sut: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, Any] = field(default_factory=dict)


@_register
@dataclass(frozen=True)
class StopTest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.STOP_TEST


@_register
@dataclass(frozen=True)
class StartInspector(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.START_INSPECTOR
    inspector: str
    url: str = ""
    options: dict[str, Any] = field(default_factory=dict)


@_register
@dataclass(frozen=True)
class StopInspector(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.STOP_INSPECTOR


@_register
@dataclass(frozen=True)
class SetRequest(Note):
    """Options by name (see protocol.options); the peer validates them all before storing any."""

    TYPE = NoteType.REQUEST
    COMMAND = Command.SET
    options: dict[str, Any]


@_register
@dataclass(frozen=True)
class StatsRequest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.STATS


@_register
@dataclass(frozen=True)
class Halt(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.HALT


@_register
@dataclass(frozen=True)
class PingRequest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.PING
    coordinator_time_ns: int


@_register
@dataclass(frozen=True)
class GetRequest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.GET
    what: str


@_register
@dataclass(frozen=True)
class StartAgent(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.START_AGENT


@_register
@dataclass(frozen=True)
class StopAgent(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.STOP_AGENT


@_register
@dataclass(frozen=True)
class AgentSource(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.AGENT_SOURCE
    url: str
    branch: str = ""


@_register
@dataclass(frozen=True)
class UserCommand(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.USER_COMMAND
    command: str
    args: list[str] = field(default_factory=list)


@_register
@dataclass(frozen=True)
class LogRequest(Note):
    """Collect this test's files and upload them to the data server."""

    TYPE = NoteType.REQUEST
    COMMAND = Command.LOG
    test_id: str
    upload_url: str = ""


@_register
@dataclass(frozen=True)
class DrainRequest(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.DRAIN
    url: str = ""
    timeout_s: float = 60.0
    # False: once drained, keep receiving until StopWorker. Receivers sharing a consumer group
    # then leave it only when every one of them has drained: one leaving while another drains
    # starts a rebalance, and the tail waits in the broker until it ends (on tansu it may never).
    stop: bool = True


@_register
@dataclass(frozen=True)
class PauseWorker(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.PAUSE_WORKER


@_register
@dataclass(frozen=True)
class ResumeWorker(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.RESUME_WORKER


@_register
@dataclass(frozen=True)
class RoleAssign(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.ROLE_ASSIGN
    role: str


@_register
@dataclass(frozen=True)
class RoleUnassign(Note):
    TYPE = NoteType.REQUEST
    COMMAND = Command.ROLE_UNASSIGN


# --- responses (peers -> coordinator, on the `maestro` topic) ---------------------------------


@_register
@dataclass(frozen=True)
class OkResponse(Note):
    TYPE = NoteType.RESPONSE
    COMMAND = Command.OK


@_register
@dataclass(frozen=True)
class ProtocolErrorResponse(Note):
    """The request could not be understood; `reason` names the fault."""

    TYPE = NoteType.RESPONSE
    COMMAND = Command.PROTOCOL_ERROR
    reason: str


@_register
@dataclass(frozen=True)
class InternalErrorResponse(Note):
    TYPE = NoteType.RESPONSE
    COMMAND = Command.INTERNAL_ERROR
    code: int = int(ErrorCode.FAILED)
    message: str = ""


@_register
@dataclass(frozen=True)
class PingResponse(Note):
    """Echoes the coordinator's clock and adds the peer's, for the offset estimate; says where
    the peer answers clock probes (protocol.clock_probe), which measure it better."""

    TYPE = NoteType.RESPONSE
    COMMAND = Command.PING
    coordinator_time_ns: int
    peer_time_ns: int
    version: str = ""
    pid: int = 0
    state: str = ""  # protocol.codes.Activity
    test_id: str = ""  # the test it was last SET for
    clock_port: int = 0  # UDP; 0: none
    clock_hosts: list[str] = field(default_factory=list)  # addresses to reach it at
    signed_only: bool = False  # it takes only notes signed with its key; else anyone may steer it


@_register
@dataclass(frozen=True)
class StatsResponse(Note):
    TYPE = NoteType.RESPONSE
    COMMAND = Command.STATS
    state: str
    test_id: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@_register
@dataclass(frozen=True)
class GetResponse(Note):
    TYPE = NoteType.RESPONSE
    COMMAND = Command.GET
    what: str
    value: Any = None


# --- notifications (peers -> everyone listening on `notifications`) ---------------------------


@_register
@dataclass(frozen=True)
class AbnormalDisconnect(Note):
    """The peer's MQTT last will: the broker publishes it when the peer vanishes."""

    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.ABNORMAL_DISCONNECT


@_register
@dataclass(frozen=True)
class TestFailed(Note):
    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_FAIL
    test_id: str = ""
    message: str = ""


@_register
@dataclass(frozen=True)
class TestSucceeded(Note):
    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_SUCCESS
    test_id: str = ""
    message: str = ""


@_register
@dataclass(frozen=True)
class DrainComplete(Note):
    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_DRAIN_COMPLETE
    success: bool
    message: str = ""


@_register
@dataclass(frozen=True)
class TestStarted(Note):
    """Maestro Java's code 70, kept so such a note still decodes. Peers do not send it: the OK to
    START_TEST says the same, and a notification per peer would double what the broker queues
    for the coordinator at that moment (Mosquitto drops beyond `max_queued_messages`)."""

    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_TEST_STARTED
    test_id: str


@_register
@dataclass(frozen=True)
class AgentAction(Note):
    """A fault action's start or end, for the report's time axis."""

    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.AGENT_ACTION
    action: str
    phase: str  # "start" | "end"
    target: str = ""
    time_ns: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


@_register
@dataclass(frozen=True)
class CommandFinished(Note):
    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_COMMAND_FINISHED
    command: str
    exit_code: int
    duration_s: float
    output_tail: str = ""


@_register
@dataclass(frozen=True)
class UploadComplete(Note):
    """A peer's files for a test went to the data server (or some did not, and why)."""

    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_UPLOAD_COMPLETE
    test_id: str
    success: bool
    uploaded: list[str] = field(default_factory=list)
    message: str = ""


@_register
@dataclass(frozen=True)
class PeerOnline(Note):
    """Sent once a peer has connected and subscribed, so a coordinator learns of it at once."""

    TYPE = NoteType.NOTIFICATION
    COMMAND = Command.NOTIFY_PEER_ONLINE
    version: str = ""
    clock_port: int = 0  # as in PingResponse
    clock_hosts: list[str] = field(default_factory=list)


# --- data (periodic, lossy is fine) ----------------------------------------------------------


@_register
@dataclass(frozen=True)
class StatsReport(Note):
    """Live statistics, about once a second while a test runs."""

    TYPE = NoteType.DATA
    COMMAND = Command.STATS_REPORT
    test_id: str
    elapsed_s: float
    counters: dict[str, Any] = field(default_factory=dict)

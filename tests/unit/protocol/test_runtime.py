"""The shared handlers, called directly: no broker, no network."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocol.codes import Activity, ErrorCode, Role
from protocol.notes import (
    GetRequest,
    GetResponse,
    Header,
    InternalErrorResponse,
    Note,
    OkResponse,
    PingRequest,
    PingResponse,
    RoleAssign,
    RoleUnassign,
    SetRequest,
    StartInspector,
    StartTest,
    StatsRequest,
    StatsResponse,
)
from protocol.options import Duration, TestOptions
from protocol.runtime import Peer, PeerConfig, starts_afresh


class Worker(Peer):
    ASSIGNABLE_ROLES = frozenset({Role.SENDER, Role.RECEIVER})


def answer(peer: Peer, note: Note) -> Any:
    return asyncio.run(peer._answer(note))


@pytest.fixture
def worker(tmp_path: Any) -> Worker:
    return Worker(PeerConfig(broker_url="mqtt://127.0.0.1:1", name="w1", role=Role.OTHER, data_dir=tmp_path))


def test_ping_echoes_the_coordinator_clock_and_adds_the_peers(worker: Worker) -> None:
    response = answer(worker, PingRequest(coordinator_time_ns=123))
    assert isinstance(response, PingResponse)
    assert response.coordinator_time_ns == 123
    assert response.peer_time_ns > 1_600_000_000 * 10**9  # a wall clock, not a perf counter
    assert response.pid > 0


@pytest.mark.parametrize(
    ("options_test", "taken", "named", "afresh"),
    [
        ("", False, "", False),  # the first SETs of a daemon add up
        ("", False, "t1", False),  # a test id after the options: they are for it
        ("t1", False, "t1", False),  # several SETs for one test (senders', then common ones)
        ("t1", False, "", False),
        ("t1", True, "t1", False),  # a SET during its own test
        ("t1", False, "t2", True),  # another test's: nothing of t1's (even never started)
        ("t1", True, "t2", True),
        ("t1", True, "", True),  # a test ran on these: an unnamed SET is for the next one
    ],
)
def test_a_set_starts_afresh_for_another_test(options_test: str, taken: bool, named: str, afresh: bool) -> None:
    assert starts_afresh(options_test, taken, named) is afresh


def test_a_new_test_starts_from_the_defaults(worker: Worker) -> None:
    # The coordinator's order: SET (with the test id), then START_TEST; then the next test.
    rr = {"test_id": "t1", "request_reply": True, "think_time": "20ms", "rate_per_s": 5}
    assert isinstance(answer(worker, SetRequest(options=rr)), OkResponse)
    assert isinstance(answer(worker, SetRequest(options={"test_id": "t1", "parallel_count": 2})), OkResponse)
    assert isinstance(answer(worker, StartTest(test_id="t1")), OkResponse)
    assert worker.settings.request_reply and worker.settings.parallel_count == 2
    assert isinstance(answer(worker, SetRequest(options={"test_id": "t2", "rate_per_s": 50})), OkResponse)
    assert worker.given == {"test_id": "t2", "rate_per_s": 50}
    assert not worker.settings.request_reply and worker.settings.parallel_count == 1
    assert worker.test_id == ""  # until START_TEST names it: no file of t2 goes to t1's folder
    assert worker.current_test_id() == "t2"
    # A script that names no test: the first SET after a test ran starts afresh too.
    assert isinstance(answer(worker, StartTest(test_id="t2")), OkResponse)
    assert isinstance(answer(worker, SetRequest(options={"parallel_count": 3})), OkResponse)
    assert worker.given == {"parallel_count": 3}


def test_a_set_for_another_test_waits_until_the_running_one_ends(worker: Worker) -> None:
    assert isinstance(answer(worker, SetRequest(options={"test_id": "t1", "rate_per_s": 5})), OkResponse)
    assert isinstance(answer(worker, StartTest(test_id="t1")), OkResponse)
    worker.state = Activity.RUNNING
    refused = answer(worker, SetRequest(options={"test_id": "t2", "rate_per_s": 50}))
    assert isinstance(refused, InternalErrorResponse) and "busy with test t1" in refused.message
    assert worker.given == {"test_id": "t1", "rate_per_s": 5}


def test_set_stores_parsed_options_and_stats_echo_them(worker: Worker) -> None:
    assert isinstance(answer(worker, SetRequest(options={"duration": "10s", "rate_per_s": 5})), OkResponse)
    assert isinstance(answer(worker, SetRequest(options={"parallel_count": 3})), OkResponse)
    settings = worker.settings
    assert (settings.duration, settings.rate_per_s, settings.parallel_count) == (Duration(seconds=10.0), 5.0, 3)
    assert settings.message_size == TestOptions().message_size  # what no SET gave keeps its default
    stats = answer(worker, StatsRequest())
    assert isinstance(stats, StatsResponse)
    assert stats.options == {"duration": "10s", "rate_per_s": 5, "parallel_count": 3}
    assert stats.state == "idle"


def test_a_bad_set_stores_nothing(worker: Worker) -> None:
    response = answer(worker, SetRequest(options={"rate_per_s": 5, "parallel_count": 0}))
    assert isinstance(response, InternalErrorResponse)
    assert response.code == ErrorCode.INVALID_OPTION
    assert "option 'parallel_count'" in response.message
    assert worker.settings == TestOptions() and worker.given == {}


def test_role_assignment(worker: Worker) -> None:
    assert isinstance(answer(worker, RoleAssign(role="sender")), OkResponse)
    assert worker.role == Role.SENDER
    assert worker.bus.identity.role == "sender"
    refused = answer(worker, RoleAssign(role="inspector"))
    assert isinstance(refused, InternalErrorResponse) and refused.code == ErrorCode.UNSUPPORTED
    assert isinstance(answer(worker, RoleUnassign()), OkResponse)
    assert worker.role == Role.OTHER


def test_a_daemon_that_keeps_its_role(tmp_path: Any) -> None:
    inspector = Peer(PeerConfig(broker_url="mqtt://127.0.0.1:1", name="i1", role=Role.INSPECTOR, data_dir=tmp_path))
    response = answer(inspector, RoleAssign(role="sender"))
    assert isinstance(response, InternalErrorResponse) and response.code == ErrorCode.UNSUPPORTED


def test_a_command_for_another_role_is_refused_not_crashed(worker: Worker) -> None:
    response = answer(worker, StartInspector(inspector="jolokia"))
    assert isinstance(response, InternalErrorResponse)
    assert response.code == ErrorCode.UNSUPPORTED
    assert "does not handle StartInspector" in response.message


def test_get(worker: Worker) -> None:
    response = answer(worker, GetRequest(what="role"))
    assert isinstance(response, GetResponse) and response.value == "other"
    assert isinstance(answer(worker, GetRequest(what="secrets")), InternalErrorResponse)


def test_peer_names_cannot_break_topics(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="peer name"):
        PeerConfig(broker_url="mqtt://h", name="a/b", role=Role.AGENT, data_dir=tmp_path)


def test_a_repeated_request_is_answered_again_and_not_acted_on_twice(worker: Worker) -> None:
    started: list[str] = []
    worker.test_started = lambda: started.append(worker.test_id)  # type: ignore[method-assign]
    replies: list[Note] = []
    worker.bus.reply = lambda _request, response: replies.append(response) or response  # type: ignore[method-assign]
    note = StartTest(test_id="t-1").with_header(Header(message_id="m-1", sender_id="coordinator"))

    async def twice() -> None:
        await worker._dispatch(worker.topics.by_id(worker.peer_id), note)
        await worker._dispatch(worker.topics.by_id(worker.peer_id), note)  # the coordinator asked again

    asyncio.run(twice())
    assert started == ["t-1"]
    assert len(replies) == 2 and all(isinstance(r, OkResponse) for r in replies)
    assert replies[0] is replies[1]


def test_start_test_is_refused_while_a_test_runs(worker: Worker) -> None:
    worker.state = Activity.RUNNING
    worker.test_id = "t-0"
    refused = answer(worker, StartTest(test_id="t-1"))
    assert isinstance(refused, InternalErrorResponse) and "busy with test t-0" in refused.message

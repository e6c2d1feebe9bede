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
from protocol.options import Duration
from protocol.runtime import Peer, PeerConfig


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


def test_set_stores_parsed_options_and_stats_echo_them(worker: Worker) -> None:
    assert isinstance(answer(worker, SetRequest(options={"duration": "10s", "rate_per_s": 5})), OkResponse)
    assert isinstance(answer(worker, SetRequest(options={"parallel_count": 3})), OkResponse)
    assert worker.options == {"duration": Duration(seconds=10.0), "rate_per_s": 5.0, "parallel_count": 3}
    stats = answer(worker, StatsRequest())
    assert isinstance(stats, StatsResponse)
    assert stats.options == {"duration": "10s", "rate_per_s": 5, "parallel_count": 3}
    assert stats.state == "idle"


def test_a_bad_set_stores_nothing(worker: Worker) -> None:
    response = answer(worker, SetRequest(options={"rate_per_s": 5, "parallel_count": 0}))
    assert isinstance(response, InternalErrorResponse)
    assert response.code == ErrorCode.INVALID_OPTION
    assert "option 'parallel_count'" in response.message
    assert worker.options == {}


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

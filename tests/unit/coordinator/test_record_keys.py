"""The coordinator's test.json has the keys the coordinator wrote before it was a record: the
golden files (tests/unit/protocol/golden, real runs on main before TestRecord) against the
records a phase and a series over simulated peers write now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coordinator.definitions import FixedRateTest, SearchTest
from coordinator.running.cast import Cast
from coordinator.running.phase import Phase
from coordinator.running.series import run_series
from protocol.codes import Role
from tests.support.memory_bus import MemoryStore, SimulatedPeer, memory_client

GOLDEN = Path(__file__).parents[1] / "protocol" / "golden"
TEST = FixedRateTest(send_url="amqp://sut/q", rate=100, duration="1s", warm_up="0s")


def _golden(run: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / f"test-{run}.json").read_text())
    return data


def _peer_keys(record: dict[str, Any]) -> set[tuple[str, ...]]:
    """Each peer's keys and its clock's (one tuple a peer)."""
    return {(*sorted(p), "clock:", *sorted(p["clock"])) for p in record["peers"]}


def test_a_phase_writes_the_keys_it_wrote_before_when_it_opens_and_when_it_ends() -> None:
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    store = MemoryStore()
    result = Phase(client, TEST, "t-1", store, Cast.choose(client, TEST), show_progress=False).run()

    opening, closing = store.opened["t-1"].to_json(), result.record.to_json()
    assert opening.keys() == _golden("opening").keys()
    assert _peer_keys(opening) <= _peer_keys(_golden("opening"))
    assert closing.keys() == _golden("kafka-demo").keys()
    assert _peer_keys(closing) <= _peer_keys(_golden("kafka-demo"))
    assert closing["summary"].keys() == _golden("kafka-demo")["summary"].keys()


def test_a_series_writes_the_keys_it_wrote_before() -> None:
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    store = MemoryStore()
    search = SearchTest(base=TEST, low_rate=100, high_rate=200, resolution=0.5, max_steps=3)
    result = run_series(client, search, store, "t-2", progress=False)

    record, golden = result.record.to_json(), _golden("search")
    assert record.keys() == golden.keys()
    assert {tuple(sorted(row)) for row in record["steps"]} == {tuple(sorted(row)) for row in golden["steps"]}
    assert record["max_sustainable"].keys() == golden["max_sustainable"].keys()
    assert store.opened["t-2"].to_json().keys() == golden.keys() - {"stopped_by", "steps", "curve", "max_sustainable"}
    assert store.opened["t-2"].to_json()["ended"] is None  # a series' opening record: not ended yet

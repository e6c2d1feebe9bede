"""A phase and a series against simulated peers on an in-memory bus: the lifecycle's order, what
ends a phase, and a search that finds a known limit."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import pytest

from coordinator.definitions import FixedRateTest, IncrementalTest, SearchTest
from coordinator.errors import MaestroError
from coordinator.running import ending
from coordinator.running.cast import Cast
from coordinator.running.phase import Phase
from coordinator.running.series import run_series
from protocol.codes import Role
from protocol.figures import TestFigures
from protocol.notes import (
    DrainRequest,
    LogRequest,
    PingRequest,
    SetRequest,
    StartTest,
    StartWorker,
    StopWorker,
)
from protocol.signing import NoteKey
from protocol.test_record import ClockEstimate, PeerEntry
from tests.support.memory_bus import MemoryStore, SimulatedPeer, memory_client

TEST = FixedRateTest(send_url="amqp://sut/q", rate=100, duration="1s", warm_up="0s")


def _before(peer: PeerEntry) -> ClockEstimate:
    """The peer's clock as measured before the load (there must be one)."""
    before = peer.clock.estimate("before")
    assert before is not None, peer
    return before


def _kinds(peer: SimulatedPeer) -> list[str]:
    return [type(n).__name__ for n in peer.received]


def test_a_phase_runs_its_lifecycle_in_order_and_stores_its_result() -> None:
    sender = SimulatedPeer("s1", Role.SENDER, clock_offset_ns=5_000_000)
    receiver = SimulatedPeer("r1", Role.RECEIVER)
    client, _ = memory_client([sender, receiver])
    store = MemoryStore()
    result = Phase(client, TEST, "t-1", store, Cast.choose(client, TEST), show_progress=False).run()

    assert result.passed, result.reason
    pings = ["PingRequest"] * 3
    assert _kinds(receiver)[1:] == [
        "SetRequest",
        *pings,
        "StartTest",
        "StartWorker",
        "DrainRequest",
        "StopWorker",  # once every receiver has drained (DrainRequest.stop)
        *pings,
        "LogRequest",
    ]
    # The sender finished on its own: no StopWorker, nothing to drain.
    assert _kinds(sender)[1:] == ["SetRequest", *pings, "StartTest", "StartWorker", *pings, "LogRequest"]
    assert isinstance(sender.received[1], SetRequest) and sender.received[1].options["test_id"] == "t-1"
    # The common start is given in the sender's own clock: 5 ms ahead of ours.
    start = next(n for n in sender.received if isinstance(n, StartWorker))
    assert abs(start.start_for(sender.peer_id) - start.start_at_ns - 5_000_000) < 1_000_000
    # The common start is the phase's 1 s margin and 4 of the sender's round trips (as measured
    # before) after it was set, which is the order's stamp but for the time taken to send it (up
    # to 50 ms allowed, a loaded machine): 10 ms more margin fails it.
    peers = result.record.peers or ()
    rtt_ns = _before(next(p for p in peers if p.name == "s1")).rtt_us * 1000
    ahead = start.start_at_ns - start.header.timestamp_ns - (1_000_000_000 + 4 * rtt_ns)
    assert -50_000_000 <= ahead < 1_000_000, ahead
    clocks = {p.name: _before(p) for p in peers}
    assert abs(clocks["s1"].offset_us - 5000) < 1000 and abs(clocks["r1"].offset_us) < 1000
    assert store.stored == [result]
    assert set((result.record.collection or {}).values()) == {"uploaded"}
    assert result.record.target_rate == 100
    # The figures were asked for with the clocks, after they were measured both sides of the
    # run: the result's latency is the corrected one the report shows.
    assert store.clocks_given == result.record.peers
    assert all(p.clock.estimate("before") and p.clock.estimate("after") for p in peers)
    assert result.record.phase_of is None and "phase_of" not in result.record.to_json()
    # The live statistics ended with the outcome and the summary's counts.
    last = store.live[-1][1]
    assert (last["state"], last["outcome"], last["summary"]["sent"]) == ("finished", "success", 1000)


def test_a_sender_that_fails_ends_the_phase_and_everyone_is_still_drained_and_collected() -> None:
    sender = SimulatedPeer("s1", Role.SENDER, verdict=lambda _o: "latency p99 12 ms over the 10 ms bound")
    receiver = SimulatedPeer("r1", Role.RECEIVER)
    client, _ = memory_client([sender, receiver])
    result = Phase(client, TEST, "t-2", MemoryStore(), Cast.choose(client, TEST), show_progress=False).run()

    assert not result.passed
    assert result.reason == "s1@memory: latency p99 12 ms over the 10 ms bound"
    assert not any(isinstance(n, StopWorker) for n in sender.received)  # its failure was its end
    assert any(isinstance(n, DrainRequest) for n in receiver.received)
    assert all(any(isinstance(n, LogRequest) for n in p.received) for p in (sender, receiver))


def test_a_stop_asked_on_the_live_page_ends_the_phase_as_ctrl_c_would() -> None:
    """The data server answers a live post with the stop its live page's button asked for; the
    phase fails for that reason within a second or two, and stops, drains and collects everyone."""
    sender = SimulatedPeer("s1", Role.SENDER, finishes=False)
    receiver = SimulatedPeer("r1", Role.RECEIVER)
    client, _ = memory_client([sender, receiver])
    store = MemoryStore(stop="stopped from the live page (by 127.0.0.1)")
    test = replace(TEST, duration="60s")
    started = time.monotonic()
    result = Phase(client, test, "t-9", store, Cast.choose(client, test), show_progress=False).run()
    assert (result.outcome, result.reason) == ("failure", "stopped from the live page (by 127.0.0.1)")
    assert time.monotonic() - started < 10  # not the test's 60 s
    assert any(isinstance(n, StopWorker) for n in sender.received)
    assert any(isinstance(n, DrainRequest) for n in receiver.received)
    assert all(any(isinstance(n, LogRequest) for n in p.received) for p in (sender, receiver))


def test_a_receiver_whose_drain_is_never_told_is_still_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ending, "_DRAIN_GRACE_S", 0.5)
    receiver = SimulatedPeer("r1", Role.RECEIVER, drain_lost=True)
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), receiver])
    test = replace(TEST, drain_timeout_s=0.5)
    result = Phase(client, test, "t-4", MemoryStore(), Cast.choose(client, test), show_progress=False).run()
    assert not result.passed and result.reason == "no DrainComplete from r1@memory (receiver) within 1 s"
    # Told to drain and keep receiving; then, its DrainComplete missing, told to stop all the same.
    kinds = _kinds(receiver)
    assert kinds.index("DrainRequest") < kinds.index("StopWorker")


def test_figures_that_show_loss_fail_a_phase_the_peers_passed() -> None:
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    store = MemoryStore()
    store.figures |= {"lost": 10}
    result = Phase(client, TEST, "t-3", store, Cast.choose(client, TEST), show_progress=False).run()
    assert result.reason == "lost 10 of 1,000 messages (1%; bound 0%)"


def test_role_less_workers_are_given_roles_receivers_first() -> None:
    idle = [SimulatedPeer(f"w{n}", Role.OTHER) for n in range(2)]
    client, bus = memory_client(idle)
    cast = Cast.choose(client, TEST)
    assert [p.role for p in cast.receivers + cast.senders] == [Role.RECEIVER, Role.SENDER]
    assert [type(n).__name__ for _, n in bus.requests[1:]] == ["RoleAssign", "RoleAssign"]


def test_a_worker_busy_with_another_test_is_not_cast_and_is_named() -> None:
    busy = SimulatedPeer("s1", Role.SENDER, busy_with="nightly-42")
    client, _ = memory_client([busy, SimulatedPeer("s2", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    assert [p.name for p in Cast.choose(client, TEST).senders] == ["s2"]
    with pytest.raises(MaestroError, match=r"busy with another test: s1@memory \(sender\) \(nightly-42\)"):
        Cast.choose(client, FixedRateTest(send_url="amqp://sut/q", rate=100, duration="1s", senders=2))


def test_a_search_over_simulated_peers_finds_the_limit_they_have() -> None:
    # The SUT holds 740 msg/s per client: above it the sender's fail condition trips.
    def verdict(options: dict[str, object]) -> str | None:
        rate = float(options["rate_per_s"])  # type: ignore[arg-type]
        return None if rate <= 740 else f"rate {rate:g} missed"

    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER, verdict=verdict), SimulatedPeer("r1", Role.RECEIVER)])
    search = SearchTest(base=TEST, low_rate=100, high_rate=1000, resolution=0.02, max_steps=12)
    store = _Unmeasured()
    result = run_series(client, search, store, "t-4", progress=False)

    assert result.record.max_sustainable is not None
    best = result.record.max_sustainable.rate_per_client or 0.0
    assert 740 * 0.98 <= best <= 740
    rates = [row.rate_per_client for row in result.record.steps or ()]
    assert rates[:2] == [100, 1000]
    assert [r.test_id for r in result.steps] == [f"t-4.probe{n:02d}" for n in range(1, len(rates) + 1)]
    assert store.stored[-1] is result  # the parent's record last, after every phase's own
    # Each step says whose step it is: `maestro history` leaves steps out of a test's nights.
    assert {r.record.phase_of for r in store.stored[:-1]} == {"t-4"}
    assert result.record.phase_of is None and "phase_of" not in result.record.to_json()


class _Unmeasured(MemoryStore):
    """Figures with no send rate: a step or probe is judged by its peers' verdict alone (the
    store's 100 msg/s would read as a SUT that took 100 of any rate asked)."""

    def __init__(self) -> None:
        super().__init__()
        del self.figures["send_rate"]


class _CopiesAbove(_Unmeasured):
    """Figures whose every message arrived twice from `phase` on: a phase that measured the
    test's own reading (a stream read whole by each client), not the SUT."""

    def __init__(self, phase: str) -> None:
        super().__init__()
        self.phase = phase

    def summary(self, test_id: str, *args: object, **kwargs: object) -> TestFigures:
        figures = super().summary(test_id, *args, **kwargs)  # type: ignore[arg-type]
        return (
            replace(figures, duplicates=figures.received)
            if test_id.rsplit(".", maxsplit=1)[-1] >= self.phase
            else figures
        )


@pytest.mark.parametrize("invalid_from", ["step03", "probe01", "probe02", "probe03"])
def test_a_series_that_stops_at_a_phase_that_measured_no_sut_found_no_limit(invalid_from: str) -> None:
    """A hostile pass: an incremental test whose third step read every message twice said
    "success" and "max sustainable: the second step's rate", a limit the run never found."""

    def verdict(options: dict[str, object]) -> str | None:  # the SUT holds 740 msg/s (probe02 is 1,000)
        rate = float(options["rate_per_s"])  # type: ignore[arg-type]
        return None if rate <= 740 or invalid_from == "probe02" else f"rate {rate:g} missed"

    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER, verdict=verdict), SimulatedPeer("r1", Role.RECEIVER)])
    test = (
        IncrementalTest(base=TEST, initial_rate=100, ceiling_rate=500, rate_step=100)
        if invalid_from.startswith("step")
        else SearchTest(base=TEST, low_rate=100, high_rate=1000, resolution=0.02, max_steps=12)
    )
    result = run_series(client, test, _CopiesAbove(invalid_from), "t-9", progress=False)
    assert result.outcome == "invalid" and result.record.max_sustainable is None
    assert result.reason is not None and result.reason.startswith(f"t-9.{invalid_from} did not measure the SUT (every")
    assert result.reason.endswith("the SUT's limit was not found")
    assert [r.test_id.split(".")[-1] for r in result.steps][-1] == invalid_from  # it stopped there


def test_a_step_the_sut_held_back_below_its_rate_is_no_sustained_rate() -> None:
    """A hostile pass: a step that sent 54 % of 300,050 msg/s passed (no rate bound) and was
    named the maximum sustainable rate. The store's senders send 100 msg/s whatever is asked."""
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    stepped = IncrementalTest(base=TEST, initial_rate=100, ceiling_rate=300, rate_step=100)
    result = run_series(client, stepped, MemoryStore(), "t-10", progress=False)
    assert result.outcome == "success" and len(result.steps) == 2
    assert result.record.max_sustainable is not None and result.record.max_sustainable.rate_per_client == 100
    assert result.record.stopped_by == (
        "step 2: it sent 100.0 msg/s of the 200 asked (50%): the SUT did not take the load"
    )
    search = SearchTest(base=TEST, low_rate=100, high_rate=1000, resolution=0.1, max_steps=12)
    found = run_series(client, search, MemoryStore(), "t-11", progress=False)
    assert found.record.max_sustainable is not None and found.record.max_sustainable.rate_per_client == 100
    # The first step held back: no passing step, and the reason is the shortfall, not its success's.
    held = IncrementalTest(base=TEST, initial_rate=200, ceiling_rate=300, rate_step=100)
    none = run_series(client, held, MemoryStore(), "t-13", progress=False)
    assert (none.outcome, none.reason) == (
        "failure",
        "no passing step: step 1: it sent 100.0 msg/s of the 200 asked (50%): the SUT did not take the load",
    )
    # Every step passes: the ceiling is no limit, and says so.
    client, _ = memory_client([SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)])
    low = IncrementalTest(base=TEST, initial_rate=50, ceiling_rate=100, rate_step=50)
    ceiling = run_series(client, low, _Unmeasured(), "t-12", progress=False)
    assert (
        ceiling.record.stopped_by == "the ceiling, 100 msg/s per client x 1 clients, passes: raise it to find the limit"
    )


def test_every_request_of_a_phase_waits_only_for_its_cast() -> None:
    cast_peers = [SimulatedPeer("s1", Role.SENDER), SimulatedPeer("r1", Role.RECEIVER)]
    bystander = SimulatedPeer("s2", Role.SENDER)
    client, _ = memory_client([*cast_peers, bystander])
    test = FixedRateTest(send_url="amqp://sut/q", rate=100, duration="1s", senders=1)
    cast = Cast.choose(client, test)
    Phase(client, test, "t-5", MemoryStore(), cast, show_progress=False).run()
    unused = bystander if cast.senders[0].name == "s1" else cast_peers[0]
    assert [type(n) for n in unused.received] == [PingRequest]  # discovery only
    assert not any(isinstance(n, StartTest) for n in unused.received)


def test_when_every_live_worker_is_cast_each_request_goes_once_per_role() -> None:
    senders = [SimulatedPeer(f"s{n}", Role.SENDER, clock_offset_ns=n * 1_000_000) for n in range(20)]
    receivers = [SimulatedPeer(f"r{n}", Role.RECEIVER) for n in range(20)]
    client, bus = memory_client([*senders, *receivers])
    test = FixedRateTest(send_url="amqp://sut/q", rate=100, duration="1s", senders=20, receivers=20)
    result = Phase(client, test, "t-6", MemoryStore(), Cast.choose(client, test), show_progress=False).run()
    assert result.passed, result.reason

    sent = Counter(type(note).__name__ for _, note in bus.requests)
    assert sent["SetRequest"] == sent["StartTest"] == sent["StartWorker"] == sent["LogRequest"] == 2
    assert sent["PingRequest"] == 1 + 2 * 3 * 2  # discovery, then 3 samples per role before and after
    assert {topic for topic, _ in bus.requests[1:]} == {
        bus.topics.by_role(Role.SENDER),
        bus.topics.by_role(Role.RECEIVER),
    }
    # One StartWorker for all senders: each finds its own clock's start in it.
    (start,) = [n for _, n in bus.requests if isinstance(n, StartWorker) and n.start_at_ns]
    # Each sender's start in its own clock is the common one moved by its true offset (n ms), to
    # within its measured uncertainty; twice that where the offset measured is within it, and is
    # not applied (20 answers in a row through the memory bus take a few ms).
    uncertainty_ns = {p.peer_id: _before(p).uncertainty_us * 1000 for p in result.record.peers or ()}
    for n, s in enumerate(senders):
        error_ns = abs(start.start_for(s.peer_id) - start.start_at_ns - n * 1_000_000)
        assert error_ns <= 2 * uncertainty_ns[s.peer_id], (n, error_ns, uncertainty_ns[s.peer_id])
    assert sum(1 for s in senders if start.start_for(s.peer_id) != start.start_at_ns) >= 10


def test_a_lost_answer_is_asked_for_again_and_the_peer_does_not_act_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coordinator.bus.asking.ASK_AGAIN_S", 0.05)
    sender = SimulatedPeer("s1", Role.SENDER)
    receiver = SimulatedPeer("r1", Role.RECEIVER)
    client, bus = memory_client([sender, receiver])
    receiver.lose_answers = 2  # its answers to the SET and to one PING vanish on the way
    result = Phase(client, TEST, "t-7", MemoryStore(), Cast.choose(client, TEST), show_progress=False).run()

    assert result.passed, result.reason
    assert [type(n).__name__ for _, n in bus.resent] == ["SetRequest", "PingRequest"]
    assert [topic for topic, _ in bus.resent] == [bus.topics.by_id(receiver.peer_id)] * 2
    assert _kinds(receiver).count("SetRequest") == 1  # asked twice, acted once


def test_a_stock_brokers_lopsided_ping_is_held_within_its_bound_and_moves_no_start() -> None:
    # One clock, and the broker holds every answer 40 ms on the way back (Nagle against a
    # delayed ACK): the PING reads the peer ~20 ms behind. The ± it states holds the truth (0),
    # and an offset within its ± is not applied to the sender's start.
    sender = SimulatedPeer("s1", Role.SENDER, out_s=0.0001, back_s=0.040)
    receiver = SimulatedPeer("r1", Role.RECEIVER, out_s=0.0001, back_s=0.040)
    client, bus = memory_client([sender, receiver])
    result = Phase(client, TEST, "t-8", MemoryStore(), Cast.choose(client, TEST), show_progress=False).run()
    assert result.passed, result.reason
    for peer in result.record.peers or ():
        before = _before(peer)
        assert before.path == "mqtt" and before.rtt_us >= 40_000
        assert -25_000 <= before.offset_us <= -15_000  # half the 40 ms, on the wrong side
        assert abs(before.offset_us) <= before.uncertainty_us
    (start,) = [n for _, n in bus.requests if isinstance(n, StartWorker) and n.start_at_ns]
    assert start.start_for(sender.peer_id) == start.start_at_ns


def test_keyed_peers_take_the_signed_notes_of_a_keyed_coordinator_and_a_request_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("coordinator.bus.asking.ASK_AGAIN_S", 0.05)
    key = NoteKey(b"k" * 32)
    sender = SimulatedPeer("s1", Role.SENDER, key=key)
    receiver = SimulatedPeer("r1", Role.RECEIVER, key=key)
    client, bus = memory_client([sender, receiver], key=key)
    receiver.lose_answers = 1  # its answer to the SET
    result = Phase(client, TEST, "t-9", MemoryStore(), Cast.choose(client, TEST), show_progress=False).run()
    assert result.passed, result.reason
    # The SET asked again is stamped anew: a copy with the same stamp would be a replay.
    assert [type(n).__name__ for _, n in bus.resent] == ["SetRequest"] and receiver.refused == []


def test_keyed_peers_refuse_an_unkeyed_coordinator() -> None:
    key = NoteKey(b"k" * 32)
    sender = SimulatedPeer("s1", Role.SENDER, key=key)
    client, _ = memory_client([sender, SimulatedPeer("r1", Role.RECEIVER)])
    assert [p.name for p in client.peers] == ["r1"]  # the keyed one did not take the discovery PING
    assert sender.refused == ["unsigned note: this peer takes only notes signed with its key"]


def test_a_control_broker_lost_mid_phase_holds_the_notes_and_counts_the_outage() -> None:
    def lose_the_broker(_options: dict[str, object]) -> None:
        bus.lose_broker(0.3)  # as the sender is started: its verdict and the rest wait for the broker

    sender = SimulatedPeer("s1", Role.SENDER, verdict=lose_the_broker)
    receiver = SimulatedPeer("r1", Role.RECEIVER)
    client, bus = memory_client([sender, receiver])
    result = Phase(client, TEST, "t-10", MemoryStore(), Cast.choose(client, TEST), show_progress=False).run()
    assert result.passed, result.reason
    assert 0.3 <= bus.downtime_s() < 1.0
    ((lost_ns, back_ns),) = bus.outages
    assert 0.3 <= (back_ns - lost_ns) / 1e9 < 1.0

"""#38: a rogue MQTT client without the key replays signed notes across the coordinator's life:
its own last will, harvested by taking over its client id, to stop the test it runs; and the
previous run's notifications to a fresh coordinator. Real daemons, a real broker; each test
also shows the legitimate run passing, so a guard refusing everything would fail it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.processes import Daemons
from support.rogue import Captured, Rogue

from coordinator import FixedRateTest, IncrementalTest, Maestro
from coordinator.outcome.results import TestResult
from coordinator.running.local import LocalCluster
from protocol.broker_url import BrokerUrl
from protocol.codes import NoteType
from protocol.notes import AbnormalDisconnect, PeerOnline, StatsReport
from protocol.signing import write_new_key

_GRACE_S = 5  # the workers' wait for a coordinator whose will came: short, so the test is


@pytest.fixture
def keyed_workers(daemons: Daemons, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A keyed sender s1 and receiver r1, and a data server; the key's path and its URL."""
    key_file = write_new_key(tmp_path / "lab.key")
    for name, role in (("s1", "sender"), ("r1", "receiver")):
        daemons.start(
            "maestro-worker", name, "--role", role, "--key-file", str(key_file), "--coordinator-grace-s", str(_GRACE_S)
        )
    with LocalCluster(tmp_path / "server", broker_url="unused") as local:
        yield key_file, local.data_server(tmp_path / "results")


def _test(duration: str) -> FixedRateTest:
    return FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/replays-{uuid.uuid4().hex[:8]}", rate=50, duration=duration
    )


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("rabbitmq")
def test_a_harvested_coordinator_will_replayed_does_not_stop_its_test(
    daemons: Daemons, keyed_workers: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    key_file, data_server = keyed_workers
    caplog.set_level(logging.WARNING, logger="coordinator.bus.peer_bus")
    broker = BrokerUrl.parse(daemons.broker_url)
    replayed = threading.Event()
    with (
        Rogue(daemons.broker_url, daemons.prefix) as rogue,
        Maestro.connect(
            daemons.broker_url, topic_prefix=daemons.prefix, key_file=key_file, data_server=data_server
        ) as m,
    ):
        m.wait_for_peers(2, timeout_s=20)

        def harvest_and_replay() -> None:
            rogue.wait_for(lambda c: isinstance(c.note, StatsReport), timeout_s=60)
            coordinator_id = m.bus.identity.peer_id  # printed in every note's header: no secret
            # Connecting with its client id makes the broker drop it and publish its signed will.
            thief = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=coordinator_id)
            thief.connect(broker.host, broker.port)
            thief.loop_start()
            time.sleep(0.3)
            thief.disconnect()
            thief.loop_stop()
            will = rogue.wait_for(
                lambda c: isinstance(c.note, AbnormalDisconnect) and c.note.header.sender_id == coordinator_id, 10
            )
            time.sleep(4)  # the coordinator is back meanwhile, and the peers know it
            rogue.publish(will.topic, will.data)
            replayed.set()

        thief = threading.Thread(target=harvest_and_replay)
        thief.start()
        # Long enough for the workers' grace to run out after the replay, had they believed it.
        result = m.run(_test(f"{_GRACE_S + 10}s"), progress=False)
        thief.join(30)
    assert replayed.is_set(), "the rogue never replayed the will"
    assert result.passed, result.reason
    assert any("our own last will was published" in r.getMessage() for r in caplog.records)
    for name in ("s1", "r1"):
        log = daemons.log(name)
        assert "the coordinator is back" in log, name
        assert "is gone" not in log, name


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("rabbitmq")
def test_a_fresh_coordinator_refuses_the_previous_runs_notifications(
    daemons: Daemons, keyed_workers: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    key_file, data_server = keyed_workers
    caplog.set_level(logging.WARNING, logger="protocol.bus")

    def run_once() -> TestResult:
        # A coordinator process of its own per run, as two `maestro test` runs are.
        with Maestro.connect(
            daemons.broker_url, topic_prefix=daemons.prefix, key_file=key_file, data_server=data_server
        ) as m:
            m.wait_for_peers(2, timeout_s=20)
            return m.run(_test("4s"), progress=False)

    with Rogue(daemons.broker_url, daemons.prefix) as rogue:
        first = run_once()
        assert first.passed, first.reason
        old = [
            c
            for c in rogue.captured
            if c.note.TYPE in (NoteType.NOTIFICATION, NoteType.DATA)
            and c.note.header.sender_role != "coordinator"
            and not isinstance(c.note, PeerOnline | AbnormalDisconnect)
        ]
        kinds = {type(c.note).__name__ for c in old}
        assert {"TestSucceeded", "DrainComplete", "UploadComplete", "StatsReport"} <= kinds, kinds

        def replay(c: Captured) -> bool:
            return isinstance(c.note, StatsReport) and c.note.test_id != first.test_id

        def replay_when_the_second_runs() -> None:
            rogue.wait_for(replay, timeout_s=60)
            for c in old:  # seconds old, well inside the 60 s window
                rogue.publish(c.topic, c.data)
            replayed.set()

        replayed = threading.Event()
        replayer = threading.Thread(target=replay_when_the_second_runs)
        replayer.start()
        second = run_once()
        replayer.join(30)
    assert replayed.is_set(), "the rogue never replayed the first run's notes"
    assert second.passed, second.reason
    assert second.summary.sent == second.summary.received > 0
    refused = [r.getMessage() for r in caplog.records if "refused a note" in r.getMessage()]
    assert any(f"signed for test {first.test_id}; this coordinator runs test {second.test_id}" in r for r in refused), (
        refused
    )


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("rabbitmq")
def test_a_keyed_series_takes_each_phases_own_notes(
    daemons: Daemons, keyed_workers: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The legitimate path the test binding must not break: phases sealed for ID.label one after
    another, each taking its own verdicts, drains and uploads."""
    key_file, data_server = keyed_workers
    caplog.set_level(logging.WARNING, logger="protocol.bus")
    with Maestro.connect(
        daemons.broker_url, topic_prefix=daemons.prefix, key_file=key_file, data_server=data_server
    ) as m:
        m.wait_for_peers(2, timeout_s=20)
        result = m.run(
            IncrementalTest(base=_test("3s"), initial_rate=20, ceiling_rate=40, rate_step=20), progress=False
        )
    assert result.passed, result.reason
    assert len(result.steps) == 2 and all(step.passed for step in result.steps), [s.reason for s in result.steps]
    assert all(step.test_id.startswith(f"{result.test_id}.") for step in result.steps)
    assert not [r.getMessage() for r in caplog.records if "refused a note" in r.getMessage()]

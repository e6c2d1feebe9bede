"""Nothing is lost at collection: the coordinator dies mid-test, or the data server is down when
the peers upload. Real daemons, RabbitMQ as the SUT, Mosquitto as the control broker, real data
server processes (stopped and restarted on their port) and the real `maestro` command.

Known answers: rate x clients x seconds messages; every peer's files on the data server in the
end, whatever went away in between.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.processes import BIN, Daemons
from support.waiting import until_blocking

from coordinator import FixedRateTest, Maestro
from coordinator.running.local import LocalError, wait_for_port
from protocol.embedded_broker import free_port

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]


class DataServerProcess:
    """`maestro serve` on a fixed port, to stop and start again."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root, self.log, self.port = root, log, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "reports", "serve", "--data", str(self.root), "--port", str(self.port)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, timeout_s=20, proc=self.proc)
        except LocalError as exc:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
            raise AssertionError(f"the data server: {exc}\n{tail}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DataServerProcess]:
    started = DataServerProcess(tmp_path / "results", tmp_path / "data-server.log")
    yield started
    started.stop()


def _info(url: str, test_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/results/{test_id}") as response:
        info: dict[str, Any] = json.loads(response.read())
    return info


def _files(url: str, test_id: str) -> set[str]:
    return {f["path"] for f in _info(url, test_id)["files"]}


def _queue() -> str:
    return f"amqp://guest:guest@127.0.0.1:5672/maestro-collect-{uuid.uuid4().hex[:8]}"


def _maestro(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "maestro"), *args], capture_output=True, text=True, timeout=timeout_s, check=False)


# The README's bound: after the coordinator's last will, senders stop within the daemons'
# --coordinator-grace-s and the 1 s of their watch's check; receivers then take what is in flight
# for up to 10 s more. A grace of 5 s instead of 15 s, to keep the test short.
_GRACE_S = 5
_SENDERS_STOP_S = _GRACE_S + 1
_RECEIVERS_STOP_S = _SENDERS_STOP_S + 10


def _state(maestro: Maestro, name: str) -> str:
    return next(p.state.value for p in maestro.ping(to=maestro.workers()) if p.name == name)


def _coordinator_killed_mid_test(daemons: Daemons, maestro: Maestro, where: list[str], definition: Path) -> str:
    """`maestro test --file definition` on the daemons, killed with -9 once its load runs; its
    test id."""
    test_id = f"lost-{uuid.uuid4().hex[:6]}"
    argv = [str(BIN / "maestro"), "test", "--file", str(definition), *where, "--test-id", test_id, "--quiet"]
    coordinator = subprocess.Popen([*argv, "--no-report"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Until the load runs (both workers say so), then the coordinator dies without a word.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(p.state.value == "running" for p in maestro.ping(to=maestro.workers())):
                break
            time.sleep(0.5)
        time.sleep(3)
        coordinator.send_signal(signal.SIGKILL)
    finally:
        coordinator.wait(10)
    return test_id


def _check_the_rebuilt_record(record: dict[str, Any], junit: str) -> None:
    """The full record, from the one the coordinator opened and the peers' own accounts."""
    assert record["reason"].startswith("the coordinator was lost")
    assert (record["kind"], record["name"], record["labels"]) == ("fixed-rate", "a night cut short", {"build": "1.2.3"})
    assert record["definition"]["rate"] == 50 and record["definition"]["duration"] == "5m"
    started, ended = datetime.fromisoformat(record["started"]), datetime.fromisoformat(record["ended"])
    # The load ran from the start to the sender's stop: 3 s or more, then its grace.
    assert 3 + _GRACE_S <= (ended - started).total_seconds() <= 60, (started, ended)
    clocks = {p["name"]: p["clock"] for p in record["peers"]}
    assert set(clocks) == {"r1", "s1"} and all("offset_us" in c["before"] for c in clocks.values()), clocks
    assert 'time="0.000"' not in junit, junit  # #34: it said so after kill -9
    assert sorted(who.split("@")[0] for who in record["collection"]) == ["r1", "s1"]
    s = record["summary"]
    # Whatever was sent before the stop was received, once.
    assert s["sent"] > 0 and (s["received"], s["lost"], s["duplicates"]) == (s["sent"], 0, 0)


@pytest.mark.usefixtures("rabbitmq")
def test_peers_stop_when_the_coordinator_dies_and_maestro_collect_gathers_their_files(
    daemons: Daemons, prefix: str, server: DataServerProcess, maestro: Maestro, tmp_path: Path
) -> None:
    server.start()
    grace = ("--coordinator-grace-s", str(_GRACE_S))
    daemons.start("maestro-worker", "r1", "--role", "receiver", *grace)
    daemons.start("maestro-worker", "s1", "--role", "sender", *grace)
    maestro.wait_for_peers(2, timeout_s=20)
    definition = tmp_path / "night.toml"
    definition.write_text(
        f'kind = "fixed-rate"\nname = "a night cut short"\nsend_url = "{_queue()}"\nrate = 50\nparallel = 2\n'
        'duration = "5m"\n[labels]\nbuild = "1.2.3"\n'
    )
    where = ["--broker", daemons.broker_url, "--topic-prefix", prefix, "--data-server", server.url]
    test_id = _coordinator_killed_mid_test(daemons, maestro, where, definition)
    killed = time.monotonic()
    # Its last will reaches the workers; after their grace they stop the load, within the bound.
    until_blocking(lambda: _state(maestro, "s1") != "running", _SENDERS_STOP_S + 2, "the sender's stop")
    senders_stopped = time.monotonic() - killed
    until_blocking(lambda: _state(maestro, "r1") != "running", _RECEIVERS_STOP_S + 2, "the receiver's stop")
    receivers_stopped = time.monotonic() - killed
    assert _GRACE_S - 1 <= senders_stopped <= _SENDERS_STOP_S + 1, senders_stopped  # 1 s: the PINGs' pace
    assert receivers_stopped <= _RECEIVERS_STOP_S + 1, receivers_stopped
    assert "the coordinator of test" in daemons.log("s1")
    # Nothing but what the coordinator wrote as the test started reached the data server: the
    # files wait on the workers' hosts.
    assert _files(server.url, test_id) == {"definition.toml", "test.json"}
    assert _info(server.url, test_id)["test"]["outcome"] is None  # opened, never finished
    assert any((daemons.log_dir / "s1" / test_id).rglob("sender-*.csv.gz"))

    collected = _maestro("collect", test_id, *where, "--no-report")
    assert collected.returncode == 0, collected.stderr
    info = _info(server.url, test_id)
    _check_the_rebuilt_record(info["test"], (server.root / test_id / "junit.xml").read_text())
    files = {f["path"] for f in info["files"]}
    assert {"sender/s1/peer.json", "receiver/r1/peer.json", "test.json", "definition.toml"} <= files
    assert "coordinator was lost" in json.loads((server.root / test_id / "sender/s1/peer.json").read_text())["failure"]
    # And the report is built from what was collected.
    built = subprocess.run(
        [sys.executable, "-m", "reports", "report", str(server.root), test_id],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (server.root / test_id / "report" / "index.html").is_file()


def test_a_data_server_down_at_collection_loses_nothing(
    daemons: Daemons, prefix: str, rabbitmq: None, server: DataServerProcess
) -> None:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(send_url=_queue(), rate=50, parallel=2, duration="4s", warm_up="0s")
    # Down from the start: the peers' uploads find nobody, retry with backoff, and get through
    # once it is back (20 s in: well after the load and the drain, while the peers still retry).
    restart = threading.Timer(20, server.start)
    restart.start()
    try:
        with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=1, data_server=server.url) as m:
            m.wait_for_peers(2, timeout_s=20)
            result = m.run(test, progress=False)
    finally:
        restart.join()
    assert result.passed, result.reason
    s = result.summary.to_json()
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (400, 400, 0, 0)
    assert {"sender/s1/peer.json", "receiver/r1/peer.json"} <= _files(server.url, result.test_id)
    assert "trying again" in daemons.log("s1")


def test_files_a_collection_could_not_upload_are_named_and_collected_later(
    daemons: Daemons, prefix: str, rabbitmq: None, server: DataServerProcess
) -> None:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    # The server is away for the whole test and the peers give up after 2 s of retries: the
    # result names both, and test.json waits on this machine ($MAESTRO_UNSTORED).
    test = FixedRateTest(
        send_url=_queue(), rate=50, parallel=2, duration="4s", warm_up="0s", options={"upload_retry_s": 2}
    )
    with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=1, data_server=server.url) as m:
        m.wait_for_peers(2, timeout_s=20)
        result = m.run(test, progress=False)
    assert not result.passed
    assert result.reason is not None and result.reason.startswith("collection:"), result.reason
    collection = result.record.collection or {}
    missing = [who for who, why in collection.items() if "kept here for `maestro collect`" in why]
    assert sorted(who.split("@")[0] for who in missing) == ["r1", "s1"]
    assert any("not stored on the data server" in note for note in result.record.notes or ())

    server.start()
    where = ["--broker", daemons.broker_url, "--topic-prefix", prefix, "--data-server", server.url]
    collected = _maestro("collect", result.test_id, *where, "--no-report")
    assert collected.returncode == 0, collected.stderr
    record = _info(server.url, result.test_id)["test"]
    s = record["summary"]
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (400, 400, 0, 0)
    assert record["reason"] == result.reason  # the coordinator's own record, now on the server
    assert "collected by `maestro collect`" in record["notes"][-1]
    assert {"sender/s1/peer.json", "receiver/r1/peer.json"} <= _files(server.url, result.test_id)

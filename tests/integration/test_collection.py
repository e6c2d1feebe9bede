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
from pathlib import Path
from typing import Any

import pytest
from support.processes import BIN, Daemons

from coordinator import FixedRateTest, Maestro
from coordinator.local import LocalError, wait_for_port
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


def test_peers_stop_when_the_coordinator_dies_and_maestro_collect_gathers_their_files(
    daemons: Daemons, prefix: str, rabbitmq: None, server: DataServerProcess, maestro: Maestro
) -> None:
    server.start()
    # A grace of 5 s instead of 15 s, to keep the test short.
    daemons.start("maestro-worker", "r1", "--role", "receiver", "--coordinator-grace-s", "5")
    daemons.start("maestro-worker", "s1", "--role", "sender", "--coordinator-grace-s", "5")
    maestro.wait_for_peers(2, timeout_s=20)
    test_id = f"lost-{uuid.uuid4().hex[:6]}"
    where = ["--broker", daemons.broker_url, "--topic-prefix", prefix, "--data-server", server.url]
    argv = [str(BIN / "maestro"), "test", *where, "--send-url", _queue(), "--rate", "50", "--parallel", "2"]
    argv += ["--duration", "5m", "--test-id", test_id, "--quiet", "--no-report"]
    coordinator = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Until the load runs (both workers say so), then the coordinator dies without a word.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(p.state.value == "running" for p in maestro.ping(to=maestro.workers())):
                break
            time.sleep(0.5)
        time.sleep(3)
        coordinator.send_signal(signal.SIGKILL)
        killed = time.monotonic()
    finally:
        coordinator.wait(10)
    # Its last will reaches the workers; after their grace they stop the load.
    while time.monotonic() - killed < 40:
        states = {p.name: p.state.value for p in maestro.ping(to=maestro.workers())}
        if set(states.values()) == {"ready"}:
            break
        time.sleep(0.5)
    stopped_after = time.monotonic() - killed
    assert set(states.values()) == {"ready"}, states
    assert stopped_after < 30
    assert "the coordinator of test" in daemons.log("s1")
    # Nothing reached the data server yet: the files wait on the workers' hosts.
    assert not (server.root / test_id).exists()
    assert any((daemons.log_dir / "s1" / test_id).rglob("sender-*.csv.gz"))

    collected = _maestro("collect", test_id, *where, "--no-report")
    assert collected.returncode == 0, collected.stderr
    info = _info(server.url, test_id)
    record = info["test"]
    assert record["reason"].startswith("the coordinator was lost")
    assert sorted(who.split("@")[0] for who in record["collection"]) == ["r1", "s1"]
    s = record["summary"]
    # Whatever was sent before the stop was received, once.
    assert s["sent"] > 0 and (s["received"], s["lost"], s["duplicates"]) == (s["sent"], 0, 0)
    files = {f["path"] for f in info["files"]}
    assert {"sender/s1/peer.json", "receiver/r1/peer.json", "test.json"} <= files
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
    s = result.summary
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
    missing = [who for who, why in result.record["collection"].items() if "kept here for `maestro collect`" in why]
    assert sorted(who.split("@")[0] for who in missing) == ["r1", "s1"]
    assert any("not stored on the data server" in note for note in result.record["notes"])

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

"""The control plane on other brokers: the embedded amqtt one, a Mosquitto that restarts, TLS with credentials."""

from __future__ import annotations

import gc
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import Daemons, PrivateMosquitto, private_mosquitto

from coordinator import Maestro
from protocol.broker_url import BrokerUrl
from protocol.bus import ConnectFailedError, ControlBus, Identity
from protocol.embedded_broker import EmbeddedBroker
from protocol.topics import Topics


@pytest.mark.embedded_broker
def test_the_embedded_broker_serves_the_control_plane(tmp_path: Path, prefix: str) -> None:
    with EmbeddedBroker() as broker:
        daemons = Daemons(broker.url, prefix, tmp_path)
        try:
            daemons.start("maestro-worker", "w1", "--role", "receiver")
            daemons.start("maestro-agent", "a1")
            with Maestro.connect(broker.url, topic_prefix=prefix, discover_s=0) as maestro:
                maestro.wait_for_peers(2, timeout_s=20)
                assert sorted(p.name for p in maestro.discover(1.0)) == ["a1", "w1"]
                maestro.set({"rate_per_s": 5}, to=maestro.find("w1"))
                # The embedded broker delivers last wills too.
                daemons.procs["a1"].send_signal(signal.SIGKILL)
                deadline = time.monotonic() + 5
                while not maestro.lost and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert [p.name for p in maestro.lost] == ["a1"]
                maestro.halt()
            assert daemons.procs["w1"].wait(15) == 0
        finally:
            daemons.kill_all()


@pytest.mark.mosquitto
def test_peers_reconnect_after_the_broker_restarts(tmp_path: Path, prefix: str) -> None:
    broker = private_mosquitto(tmp_path)
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    daemons = Daemons(url, prefix, tmp_path)
    try:
        daemons.start("maestro-worker", "w1", "--role", "sender")
        with Maestro.connect(url, topic_prefix=prefix, discover_s=0) as maestro:
            (before,) = maestro.wait_for_peers(1, timeout_s=20)
            broker.stop()
            time.sleep(1)
            broker.start()
            # Both ends come back by themselves; the peer re-subscribes and answers again.
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                if maestro.bus.connected and maestro.discover(0.5):
                    break
            (after,) = maestro.ping(to=before)
            assert after.peer_id == before.peer_id
            maestro.set({"rate_per_s": 1}, to=after)
        assert daemons.procs["w1"].poll() is None
        assert "reconnected to the control broker" in daemons.log("w1")
    finally:
        daemons.kill_all()
        broker.stop()


def _make_tls_files(directory: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=maestro-test-ca",
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"
    )
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.cnf",
    )
    subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(directory / "passwd"), "maestro", "s3cret"],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[PrivateMosquitto]:
    _make_tls_files(tmp_path)
    broker = private_mosquitto(
        tmp_path,
        f"allow_anonymous false\npassword_file {tmp_path / 'passwd'}\ncafile {tmp_path / 'ca.pem'}\n"
        f"certfile {tmp_path / 'server.pem'}\nkeyfile {tmp_path / 'server.key'}\n",
    )
    broker.start()
    yield broker
    broker.stop()


@pytest.mark.mosquitto
def test_tls_and_credentials_come_from_the_url(tls_broker: PrivateMosquitto, tmp_path: Path, prefix: str) -> None:
    url = f"mqtts://maestro:s3cret@127.0.0.1:{tls_broker.port}?ca={tmp_path / 'ca.pem'}"
    daemons = Daemons(url, prefix, tmp_path)
    try:
        daemons.start("maestro-inspector", "i1")
        with Maestro.connect(url, topic_prefix=prefix, discover_s=0) as maestro:
            (inspector,) = maestro.wait_for_peers(1, timeout_s=20)
            assert inspector.name == "i1"
            maestro.halt()
        assert daemons.procs["i1"].wait(15) == 0
        assert "s3cret" not in daemons.log("i1")
    finally:
        daemons.kill_all()


@pytest.mark.mosquitto
def test_a_wrong_password_is_refused_at_once(tls_broker: PrivateMosquitto, tmp_path: Path, prefix: str) -> None:
    wrong = BrokerUrl.parse(f"mqtts://maestro:guess@127.0.0.1:{tls_broker.port}?ca={tmp_path / 'ca.pem'}")
    bus = ControlBus(wrong, Identity.new("x", "h", "coordinator"), Topics(prefix), last_will=False)
    started = time.monotonic()
    with pytest.raises(ConnectFailedError, match="refused us: Not authorized") as caught:
        bus.connect(timeout_s=20)
    assert not caught.value.retry
    assert "guess" not in str(caught.value)
    assert time.monotonic() - started < 10


# paho-mqtt 2.2 does not close the socket when a TLS handshake fails (client.py, _ssl_wrap_socket);
# the garbage collector does, with a ResourceWarning that is paho's, not ours.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.mosquitto
def test_a_server_the_ca_did_not_sign_is_not_trusted(tls_broker: PrivateMosquitto, prefix: str) -> None:
    plain = BrokerUrl.parse(f"mqtts://maestro:s3cret@127.0.0.1:{tls_broker.port}")
    bus = ControlBus(plain, Identity.new("y", "h", "coordinator"), Topics(prefix), last_will=False)
    with pytest.raises(ConnectFailedError, match="within 3 s"):
        bus.connect(timeout_s=3)
    gc.collect()  # reap paho's leaked sockets here, under this test's filter, not in a later test

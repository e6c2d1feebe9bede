"""The Ansible role's control broker users and ACL (#38, maestro_mosquitto_acl): the role renders
Mosquitto's configuration, password file and ACL for a small inventory (tests/support/lab.py,
nothing installed), and a Mosquitto of the test's own runs on them, as the role would start it:
as root, dropping to the `mosquitto` user before it reads the password file and the ACL.
"""

from __future__ import annotations

import os
import pwd
import queue
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.lab import Lab, LabHost, write_units
from support.processes import PrivateMosquitto

from protocol.broker_url import BrokerUrl
from protocol.embedded_broker import free_port

pytestmark = [pytest.mark.ansible]

PREFIX = "/mpt"
_HOSTS = {"ctl": ("control", "data"), "node-b": ("workers", "inspectors")}


@dataclass(frozen=True)
class Rendered:
    root: Path
    port: int

    def etc(self, host: str) -> Path:
        return self.root / host / "etc"


@pytest.fixture(scope="module")
def rendered() -> Iterator[Rendered]:
    # Not under pytest's temporary folder: that is 0700, and Mosquitto reads the password file
    # and ACL as the `mosquitto` user.
    root = Path(tempfile.mkdtemp(prefix="maestro-acl-", dir="/tmp"))
    os.chmod(root, 0o711)
    try:
        port = free_port()
        lab = Lab("", "", {name: LabHost(name, "", "127.0.0.1", groups) for name, groups in _HOSTS.items()})
        every_host = {
            "maestro_mosquitto_acl": True,
            "maestro_control_port": port,
            "maestro_control_bind": "127.0.0.1",
            "maestro_topic_prefix": PREFIX,
        }
        host_vars = {"ctl": every_host, "node-b": every_host | {"maestro_workers": [{"name": "w1"}]}}
        write_units(lab, root, host_vars)
        yield Rendered(root, port)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def broker(rendered: Rendered) -> Iterator[PrivateMosquitto]:
    mosquitto = PrivateMosquitto(rendered.etc("ctl") / "mosquitto.conf", rendered.port)
    mosquitto.start()
    try:
        yield mosquitto
    finally:
        mosquitto.stop()


class _Client:
    """A paho client that keeps what it receives, by topic, in order."""

    def __init__(self, port: int, username: str | None = None, password: str | None = None) -> None:
        self.received: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=uuid.uuid4().hex)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.on_message = lambda _c, _u, message: self.received.put((message.topic, bytes(message.payload)))
        self.port = port

    @classmethod
    def of(cls, url_file: Path) -> _Client:
        url = BrokerUrl.parse(f"@{url_file}")
        return cls(url.port, url.username, url.password)

    def connect(self) -> str:
        """The broker's answer to CONNECT: "Success" when it let us in."""
        answered: queue.Queue[mqtt.ReasonCode] = queue.Queue()
        self.client.on_connect = lambda _c, _u, _f, reason, _p: answered.put(reason)
        self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()
        try:
            return str(answered.get(timeout=10))
        except queue.Empty:
            return "no answer"

    def subscribe(self, *topics: str) -> None:
        subscribed: queue.Queue[list[mqtt.ReasonCode]] = queue.Queue()
        self.client.on_subscribe = lambda _c, _u, _m, reasons, _p: subscribed.put(reasons)
        self.client.subscribe([(topic, 1) for topic in topics])
        reasons = subscribed.get(timeout=10)
        assert all(not reason.is_failure for reason in reasons), reasons

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(10)

    def until(self, payload: bytes) -> list[tuple[str, bytes]]:
        """What arrived, up to and with `payload`."""
        seen = []
        while True:
            topic, data = self.received.get(timeout=10)
            seen.append((topic, data))
            if data == payload:
                return seen

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.timeout(300)
def test_the_role_writes_a_user_per_daemon_and_keeps_secrets_in_private_files(rendered: Rendered) -> None:
    ctl, node_b = rendered.etc("ctl"), rendered.etc("node-b")
    conf = (ctl / "mosquitto.conf").read_text()
    assert "allow_anonymous false" in conf and f"password_file {ctl}/mosquitto.passwd" in conf
    mosquitto_uid = pwd.getpwnam("mosquitto").pw_uid
    for name in ("mosquitto.passwd", "mosquitto.acl"):
        owned = (ctl / name).stat()
        assert (owned.st_uid, stat.S_IMODE(owned.st_mode)) == (mosquitto_uid, 0o600), name
    users = dict(line.split(":", 1) for line in (ctl / "mosquitto.passwd").read_text().splitlines())
    assert set(users) == {"maestro", "w1", "node-b-inspector"}
    assert all(hashed.startswith("$7$") for hashed in users.values())  # mosquitto_passwd's PBKDF2
    # Each daemon's URL, with its own password, in a file of mode 600 that its arguments name.
    w1 = BrokerUrl.parse(f"@{node_b / 'w1.broker'}")
    assert (w1.username, w1.port) == ("w1", rendered.port) and w1.password and len(w1.password) == 32
    assert f"--broker\n@{node_b / 'w1.broker'}\n" in (node_b / "w1.args").read_text()
    assert w1.password not in (node_b / "w1.args").read_text()
    kept = rendered.root / "credentials" / "mosquitto" / "w1"  # on the controller, beside the inventory
    assert kept.read_text().strip() == w1.password and stat.S_IMODE(kept.stat().st_mode) == 0o600
    # Coordinators log in on the control node only, through a file maestro.env names.
    assert f"MAESTRO_BROKER=@{ctl}/maestro.broker\n" in (ctl / "maestro.env").read_text()
    assert BrokerUrl.parse(f"@{ctl / 'maestro.broker'}").username == "maestro"
    assert not (node_b / "maestro.broker").exists()
    env_b = (node_b / "maestro.env").read_text()
    assert f"MAESTRO_BROKER=mqtt://127.0.0.1:{rendered.port}\n" in env_b and "@" not in env_b
    secrets = [p.read_text().strip() for p in kept.parent.iterdir() if not p.name.endswith("lockfile")]
    readable = [
        p
        for p in rendered.root.rglob("*")
        if p.is_file() and stat.S_IMODE(p.stat().st_mode) & 0o077 and any(s in p.read_text() for s in secrets)
    ]
    assert len(secrets) == 3 and readable == []


@pytest.mark.timeout(120)
def test_a_workers_credentials_answer_the_coordinator_but_cannot_give_orders(
    rendered: Rendered, broker: PrivateMosquitto
) -> None:
    ctl, node_b = rendered.etc("ctl"), rendered.etc("node-b")
    coordinator, worker = _Client.of(ctl / "maestro.broker"), _Client.of(node_b / "w1.broker")
    try:
        assert coordinator.connect() == worker.connect() == "Success"
        coordinator.subscribe(f"{PREFIX}/#")
        worker.subscribe(f"{PREFIX}/peer", f"{PREFIX}/peer/worker", f"{PREFIX}/coordinator")

        # Orders a worker's credentials might send, then an answer: on one connection Mosquitto
        # delivers in order, so whatever got through arrives before the answer.
        orders = [f"{PREFIX}/peer", f"{PREFIX}/peer/worker", f"{PREFIX}/peer/by-id/x", f"{PREFIX}/coordinator"]
        for topic in orders:
            worker.publish(topic, b"order " + topic.encode())
        worker.publish(f"{PREFIX}/notifications", b"notification")
        worker.publish(f"{PREFIX}/maestro", b"answer")
        assert coordinator.until(b"answer") == [
            (f"{PREFIX}/notifications", b"notification"),
            (f"{PREFIX}/maestro", b"answer"),
        ]

        # The coordinator's orders reach the worker.
        coordinator.publish(f"{PREFIX}/peer/worker", b"START_WORKER")
        coordinator.publish(f"{PREFIX}/coordinator", b"PEER_ONLINE")
        assert worker.until(b"PEER_ONLINE") == [
            (f"{PREFIX}/peer/worker", b"START_WORKER"),
            (f"{PREFIX}/coordinator", b"PEER_ONLINE"),
        ]
    finally:
        coordinator.close()
        worker.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("username", "password"), [(None, None), ("w1", "not-its-password"), ("maestro", "")])
def test_no_one_without_a_password_of_the_role_gets_in(
    broker: PrivateMosquitto, username: str | None, password: str | None
) -> None:
    stranger = _Client(broker.port, username, password)
    try:
        assert stranger.connect() == "Not authorized"
    finally:
        stranger.close()

"""#15 item 6, with real daemons over Mosquitto: a keyed agent obeys only notes signed with its
key, and a whole test runs signed, uploading to a data server that wants its bearer token."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.processes import BIN, Daemons

from coordinator import Fail, FixedRateTest, Maestro
from coordinator.running.local import LocalCluster
from protocol.bus import ControlBus
from protocol.codec import encode
from protocol.notes import GetRequest, Header, Note, OkResponse, ProtocolErrorResponse, SetRequest
from protocol.signing import NoteKey, sign
from protocol.topics import Topics
from protocol.upload import CHECKSUM_HEADER

pytestmark = pytest.mark.usefixtures("mosquitto_url")


def _secret(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    os.chmod(path, 0o600)
    return path


def _answer(bus: ControlBus, topic: str, note: Note, peer_id: str, timeout_s: float = 5.0) -> Note | None:
    _stamped, replies = bus.request(topic, note, [peer_id], timeout_s)
    return replies.replies.get(peer_id)


def _test_id_of(maestro: Maestro, topic: str, peer_id: str) -> str:
    answer = _answer(maestro.bus, topic, GetRequest(what="options"), peer_id)
    assert answer is not None and answer.COMMAND.name == "GET", answer
    return str(answer.value.get("test_id", ""))  # type: ignore[attr-defined]


def _publish_raw(broker_url: str, topic: str, data: bytes) -> None:
    """What anyone on the control broker can do: put bytes on a topic."""
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=f"intruder-{uuid.uuid4().hex}")
    host, port = broker_url.removeprefix("mqtt://").split(":")
    client.connect(host, int(port))
    client.loop_start()
    client.publish(topic, data, qos=1).wait_for_publish(5)
    client.disconnect()
    client.loop_stop()


def _crafted(note: Note, key: NoteKey | None, topic: str) -> tuple[str, bytes]:
    """A note as bytes made by hand, signed with `key` for `topic` if any: (its message id, the bytes)."""
    message_id = uuid.uuid4().hex
    header = Header(
        message_id=message_id,
        sender_id="intruder",
        sender_name="intruder",
        sender_host="h",
        sender_role="coordinator",
        timestamp_ns=time.time_ns(),
    )
    packed = encode(note.with_header(header))
    return message_id, packed if key is None else sign(packed, key, topic)


def _answer_to_raw(m: Maestro, broker_url: str, topic: str, crafted: tuple[str, bytes], peer_id: str) -> Note | None:
    """Publish crafted bytes; the peer's answer, which comes to the coordinator (correlated by id)."""
    message_id, data = crafted
    m.bus.correlator.expect(message_id, [peer_id])
    _publish_raw(broker_url, topic, data)
    return m.bus.await_replies(message_id, 3).replies.get(peer_id)


def test_a_keyed_agent_obeys_signed_notes_and_refuses_forged_replayed_and_unsigned_ones(
    daemons: Daemons, tmp_path: Path
) -> None:
    key_file = _secret(tmp_path / "lab.key", "correct horse battery staple")
    lab_key = NoteKey.from_file(key_file)
    daemons.start("maestro-agent", "a1", "--key-file", str(key_file))
    topics = Topics(daemons.prefix)
    with Maestro.connect(daemons.broker_url, topic_prefix=daemons.prefix, discover_s=0, key_file=key_file) as m:
        (agent,) = m.wait_for_peers(1, timeout_s=20)
        to_agent = topics.by_id(agent.peer_id)

        def send(crafted: tuple[str, bytes]) -> Note | None:
            return _answer_to_raw(m, daemons.broker_url, to_agent, crafted, agent.peer_id)

        # Signed (by the coordinator's bus): obeyed.
        assert isinstance(_answer(m.bus, to_agent, SetRequest(options={"test_id": "a"}), agent.peer_id), OkResponse)
        assert _test_id_of(m, to_agent, agent.peer_id) == "a"

        # Unsigned, and signed with another key: refused with PROTOCOL_ERROR naming why, not applied.
        other_key = NoteKey(b"a key that is not the lab's")
        for key, why in ((None, "unsigned note"), (other_key, "bad signature")):
            refused = send(_crafted(SetRequest(options={"test_id": "forged"}), key, to_agent))
            assert isinstance(refused, ProtocolErrorResponse) and refused.reason.startswith(why), refused
            assert _test_id_of(m, to_agent, agent.peer_id) == "a"

        # A signed note, captured and sent again later: refused, and not answered.
        captured = _crafted(SetRequest(options={"test_id": "captured"}), lab_key, to_agent)
        assert isinstance(send(captured), OkResponse)
        assert _test_id_of(m, to_agent, agent.peer_id) == "captured"
        assert isinstance(_answer(m.bus, to_agent, SetRequest(options={"test_id": "b"}), agent.peer_id), OkResponse)
        assert send(captured) is None
        assert _test_id_of(m, to_agent, agent.peer_id) == "b"
    log = daemons.log("a1")
    # One line a minute for the intruder (the bad signature and the replay were counted).
    assert log.count("refused a note") == 1 and "from intruder@h: unsigned note" in log
    assert "correct horse" not in log
    # A coordinator without the key is told why the agent does not show up.
    peers = subprocess.run(
        [str(BIN / "maestro"), "peers", "--json", "--broker", daemons.broker_url, "--topic-prefix", daemons.prefix],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(peers.stdout) == []
    assert "peer a1 refused the PING: unsigned note" in peers.stderr


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("rabbitmq")
def test_a_test_runs_signed_end_to_end_and_the_data_server_refuses_anonymous_uploads(
    daemons: Daemons, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a lab sets them up: the key and the token in files named by the environment, which the
    # daemons, the data server and the coordinator all read.
    monkeypatch.setenv("MAESTRO_KEY_FILE", str(_secret(tmp_path / "lab.key", "k" * 32)))
    monkeypatch.setenv("MAESTRO_TOKEN_FILE", str(_secret(tmp_path / "upload.token", "upload-token-77")))
    root = tmp_path / "results"
    with LocalCluster(tmp_path / "server", broker_url="unused") as local:
        url = local.data_server(root)
        anonymous = urllib.request.Request(
            f"{url}/api/results/t1/files/a.txt", data=b"x", method="PUT", headers={CHECKSUM_HEADER: "0" * 64}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(anonymous, timeout=5)
        assert refused.value.code == 401 and "bearer token" in refused.value.read().decode()
        assert not (root / "t1").exists()

        daemons.start_every_kind()
        test = FixedRateTest(
            send_url=f"amqp://guest:guest@127.0.0.1:5672/signed-{uuid.uuid4().hex[:8]}",
            rate=50,
            duration="4s",
            inspectors=("host",),
            agents=("a1",),
            fail=Fail(max_loss_ratio=0.0),
        )
        with Maestro.connect(daemons.broker_url, topic_prefix=daemons.prefix, discover_s=1, data_server=url) as m:
            m.wait_for_peers(4, timeout_s=20)
            result = m.run(test, progress=False)
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 200
    files = {p.relative_to(root / result.test_id).as_posix() for p in (root / result.test_id).rglob("*") if p.is_file()}
    assert {"test.json", "junit.xml"} <= files
    assert any(f.startswith("sender/s1/") for f in files) and any(f.startswith("receiver/r1/") for f in files)
    # Every clock measured directly, with tagged probes: a keyed peer answers no other kind.
    record = json.loads((root / result.test_id / "test.json").read_text())
    assert {p["name"]: p["clock"]["path"] for p in record["peers"]} == dict.fromkeys(("s1", "r1", "i1", "a1"), "udp")
    for name in ("s1", "r1", "i1", "a1"):
        log = daemons.log(name)
        assert "refused a note" not in log and "bad note" not in log and "upload-token-77" not in log, name

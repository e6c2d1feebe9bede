"""10,000 malformed notes over every control topic while a test runs: it still succeeds, with
the known count, every daemon is still there and answering, and none wrote a line per bad note
(#38: each logs at most one a minute per sender, and one for "other senders" past 20 of them).

The notes are random bytes, cut-off msgpack, wrong field types, unknown commands and note
types, responses where requests go, requests on the notification topics, oversized notes, and
forged last wills naming the real peers (which the coordinator must check before believing).
A fixed seed makes a failure repeatable.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path

import msgpack
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.processes import Daemons

from coordinator import FixedRateTest, Maestro
from protocol.codes import PROTOCOL_VERSION, Command, NoteType

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]

NOTES = 10_000


def _header(rng: random.Random, sender_id: str | None = None) -> dict[str, object]:
    return {
        "version": PROTOCOL_VERSION,
        "message_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "sender_id": sender_id or f"fuzz-{rng.randrange(1000)}",
        "timestamp_ns": rng.randrange(2**63),
    }


def _malformed(rng: random.Random, peer_ids: list[str]) -> bytes:
    kind = rng.randrange(9)
    commands = [c.value for c in Command]
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:
        whole = msgpack.packb([0, 10, _header(rng), {"coordinator_time_ns": 1}])
        return whole[: rng.randrange(1, len(whole))]
    if kind == 2:
        garbage = rng.choice(["now", -1.5, [1, 2], {"x": None}, None, True, 2**64 - 1, -(2**63)])
        return msgpack.packb([0, rng.choice(commands), _header(rng), {"test_id": garbage, "options": garbage}])
    if kind == 3:
        return msgpack.packb([0, rng.randrange(100, 255), _header(rng), {}])
    if kind == 4:
        return msgpack.packb([rng.randrange(4, 200), 10, _header(rng), {}])
    if kind == 5:
        return msgpack.packb([NoteType.RESPONSE.value, rng.choice(commands), _header(rng), {}])
    if kind == 6:
        return msgpack.packb([0, 10, {"version": "x"}, [1, 2, 3]])
    if kind == 7:
        # A forged last will naming a real peer: it must be asked, not believed.
        return msgpack.packb(
            [NoteType.NOTIFICATION.value, Command.ABNORMAL_DISCONNECT.value, _header(rng, rng.choice(peer_ids)), {}]
        )
    # An array cut short; now and then one over the 1 MiB limit.
    return b"\x93" + rng.randbytes(1_100_000 if rng.random() < 0.02 else 10)


def _flood(prefix: str, peer_ids: list[str], stop: threading.Event, sent: list[int]) -> None:
    rng = random.Random(20261123)
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", 1883)
    client.loop_start()
    topics = [
        f"{prefix}/peer",
        f"{prefix}/peer/worker",
        f"{prefix}/notifications",
        f"{prefix}/maestro",
        f"{prefix}/coordinator",
        *(f"{prefix}/peer/by-role/{role}" for role in ("sender", "receiver", "inspector", "agent", "other")),
        *(f"{prefix}/peer/by-id/{peer_id}" for peer_id in peer_ids),
    ]
    try:
        for n in range(NOTES):
            if stop.is_set():
                break
            client.publish(rng.choice(topics), _malformed(rng, peer_ids), qos=rng.choice([0, 1]))
            sent[0] = n + 1
            if n % 150 == 0:
                time.sleep(0.1)  # about a thousand a second: through most of the load
    finally:
        client.disconnect()
        client.loop_stop()


def test_a_test_succeeds_through_ten_thousand_malformed_notes(
    daemons: Daemons, prefix: str, rabbitmq: None, data_server: tuple[str, Path]
) -> None:
    daemons.start_every_kind()
    test = FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/maestro-fuzz-{uuid.uuid4().hex[:8]}",
        rate=50,
        parallel=2,
        duration="12s",
        warm_up="0s",
        inspectors=("host",),
        agents=("a1",),
    )
    with Maestro.connect(daemons.broker_url, topic_prefix=prefix, discover_s=1, data_server=data_server[0]) as m:
        peers = m.wait_for_peers(4, timeout_s=20)
        stop, sent = threading.Event(), [0]
        flood = threading.Thread(target=_flood, args=(prefix, [p.peer_id for p in peers], stop, sent))
        flood.start()
        flood_started = time.monotonic()
        try:
            result = m.run(test, progress=False)
        finally:
            stop.set()
            flood.join(60)
            flood_minutes = (time.monotonic() - flood_started) / 60
        assert result.passed, result.reason
        s = result.summary.to_json()
        assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (1200, 1200, 0, 0)
        assert sent[0] == NOTES, f"only {sent[0]} malformed notes went out during the test"
        # Every daemon is alive and answers; none was believed lost on a forged will.
        assert m.lost == []
        assert sorted(p.name for p in m.ping(to=m.everyone())) == ["a1", "i1", "r1", "s1"]
    assert all(proc.poll() is None for proc in daemons.procs.values())
    # Per minute that the flood lasted (a started one counts whole): 20 senders and the others.
    bound = 21 * (int(flood_minutes) + 2)
    for name in ("s1", "r1", "i1", "a1"):
        lines = daemons.log(name).splitlines()
        complaints = [line for line in lines if "bad note on" in line or "refused a note" in line]
        assert 0 < len(complaints) <= bound, (name, len(complaints), complaints[-3:])

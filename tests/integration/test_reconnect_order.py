"""No order in which clients come back to the control broker loses the coordinator.

#34: after a control-broker restart, a worker that subscribed again only after the coordinator
had announced itself (PEER_ONLINE, once) missed that; its own PEER_ONLINE then cancelled the
PING the coordinator owed it, and 15 s later it stopped its work: "the coordinator was lost".
It happened on loaded machines only, so a test that hopes to hit the race proves nothing.

Here the order is made on purpose, on real sockets: the coordinator and the sender reach a
Mosquitto through fault proxies of their own. The coordinator's is reset (its last will reaches
the sender), then the sender's; the coordinator's proxy heals and it announces itself, and only
once a listener on the coordinator topic has seen that does the sender's heal.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support.processes import Daemons, PrivateMosquitto
from support.proxy_process import ProxyProcess
from support.raw_mqtt import RawClient
from support.waiting import until_blocking

from coordinator import FixedRateTest, Maestro
from protocol.notes import AbnormalDisconnect, Note, PeerOnline
from protocol.topics import Topics

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]

# The sender gives up on a coordinator this long (connected) after its will, instead of 15 s:
# the race does not depend on it, and the failure it causes shows within a short test.
GRACE_S = 5


def _from(peer_id: str, kind: type[Note]) -> Callable[[Note], bool]:
    return lambda note: isinstance(note, kind) and note.header.sender_id == peer_id


def _the_bad_order(
    maestro: Maestro, daemons: Daemons, coordinator_path: ProxyProcess, sender_path: ProxyProcess, watch: RawClient
) -> None:
    me = maestro.bus.identity.peer_id
    coordinator_path.set_faults(reset=True)  # the coordinator drops; its will goes to the peers
    watch.wait_for(_from(me, AbnormalDisconnect), timeout_s=10)
    # The sender took the will (it logs it) before its own connection goes too.
    until_blocking(lambda: "the coordinator's last will came" in daemons.log("s1"), what="the sender taking the will")
    sender_path.set_faults(reset=True)
    seen = len(watch.received)
    coordinator_path.set_faults()  # back: it announces itself once
    watch.wait_for(_from(me, PeerOnline), timeout_s=10, after=seen)
    sender_path.set_faults()  # and only now the sender comes back, after that announcement


@pytest.mark.usefixtures("rabbitmq")
@pytest.mark.timeout(180)
def test_a_worker_that_resubscribes_after_the_coordinators_announcement_keeps_its_coordinator(
    broker: PrivateMosquitto, tmp_path: Path, prefix: str, data_server: tuple[str, Path]
) -> None:
    url, _ = data_server
    daemons = Daemons(f"mqtt://127.0.0.1:{broker.port}", prefix, tmp_path)
    watch = RawClient([Topics(prefix).coordinator], port=broker.port)
    with ProxyProcess(broker.port) as coordinator_path, ProxyProcess(broker.port) as sender_path:
        try:
            daemons.start("maestro-worker", "r1", "--role", "receiver")
            sender_url = f"mqtt://127.0.0.1:{sender_path.port}"
            daemons.start(
                "maestro-worker", "s1", "--role", "sender", "--coordinator-grace-s", str(GRACE_S), broker_url=sender_url
            )
            test = FixedRateTest(
                send_url=f"amqp://guest:guest@127.0.0.1:5672/maestro-order-{uuid.uuid4().hex[:8]}",
                rate=50,
                duration="20s",
                warm_up="0s",
            )
            with Maestro.connect(
                f"mqtt://127.0.0.1:{coordinator_path.port}", topic_prefix=prefix, discover_s=1, data_server=url
            ) as m:
                m.wait_for_peers(2, timeout_s=20)
                failures: list[BaseException] = []

                def race() -> None:
                    try:
                        _the_bad_order(m, daemons, coordinator_path, sender_path, watch)
                    except BaseException as exc:
                        failures.append(exc)

                timer = threading.Timer(4.0, race)
                timer.start()
                try:
                    result = m.run(test, progress=False)
                finally:
                    timer.join()
            assert not failures, failures  # the order was made as described
        finally:
            watch.close()
            daemons.kill_all()
    assert result.passed, result.reason
    assert "the coordinator's last will came" in daemons.log("s1")
    assert "coordinator of test" not in daemons.log("s1"), daemons.log("s1")[-2000:]
    s = result.summary.to_json()
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (1000, 1000, 0, 0)

"""A RabbitMQ broker of the test's own restarting mid-test, for the AMQP 0-9-1 and AMQP 1.0
drivers (MQTT's restart is in test_faults, Kafka's is not: tansu keeps nothing across one).

The node runs beside the shared one under another name and port, as the rabbitmq user (Debian's
rabbitmq-server switches to it), with the AMQP 1.0 plugin. `rabbitmqctl stop_app` then
`start_app` is the restart: every connection drops, the listener closes and comes back.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.private_rabbitmq import private_rabbitmq as private_node
from support.processes import Daemons
from support.runs import run_with

from coordinator import Fail, FixedRateTest
from protocol.ratefile import read_rate_file

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]


@pytest.fixture(scope="module")
def private_rabbitmq() -> Iterator[tuple[str, int]]:
    """(node name, AMQP port) of a RabbitMQ node started for this module."""
    with private_node() as node:
        yield node.node, node.port


def _restart_after(node: str, delay_s: float, down_s: float) -> threading.Thread:
    def restart() -> None:
        time.sleep(delay_s)
        subprocess.run(["rabbitmqctl", "-n", node, "stop_app"], capture_output=True, timeout=60, check=True)
        time.sleep(down_s)
        subprocess.run(["rabbitmqctl", "-n", node, "start_app"], capture_output=True, timeout=60, check=True)

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scheme", ["amqp", "amqp10"])
def test_workers_ride_out_a_broker_restart_and_count_what_it_lost(
    scheme: str,
    private_rabbitmq: tuple[str, int],
    daemons: Daemons,
    data_server: tuple[str, Path],
) -> None:
    node, port = private_rabbitmq
    url, root = data_server
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    queue = f"restart-{scheme}-{uuid.uuid4().hex[:6]}"
    send_url = (
        f"amqp://guest:guest@127.0.0.1:{port}/{queue}?durable=true"
        if scheme == "amqp"
        else f"amqp10://guest:guest@127.0.0.1:{port}//queue/{queue}"
    )
    test = FixedRateTest(send_url=send_url, rate=50, duration="16s", fail=Fail(max_loss_ratio=1.0))
    restart = _restart_after(node, delay_s=6.0, down_s=2.0)  # the test's load starts a few seconds in
    result = run_with(daemons, url, test, peers=2)
    restart.join(60)
    assert result.passed, result.reason
    s = result.summary
    # Every scheduled message went once: the sender retries a send that found the connection
    # down, and a message in flight when it dropped (unconfirmed) is sent all the same, its
    # fate counted as an error of its kind. What did not arrive is counted by sequence numbers.
    sender = json.loads((root / result.test_id / "sender" / "s1" / "peer.json").read_text())
    assert s["sent"] == 800, sender["errors"]
    assert sender["errors"].get("disconnected", 0) == sender["retries"]
    assert s["received"] + s["lost"] == s["sent"]
    # The gap shows in the receiver's rate file, and arrivals resume after it.
    arrivals = sorted(
        ata for path in (root / result.test_id / "receiver" / "r1").glob("*.csv.gz") for _, ata in read_rate_file(path)
    )
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    biggest = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[biggest] >= 1_500_000, gaps[biggest]  # 2 s down, seen as at least 1.5 s without arrivals
    after = Counter(a // 1_000_000 for a in arrivals[biggest + 1 :])
    assert sum(after.values()) >= 100  # and two seconds' worth and more came after it

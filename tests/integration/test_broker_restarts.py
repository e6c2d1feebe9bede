"""A broker of the test's own restarting mid-test: RabbitMQ for the AMQP 0-9-1, AMQP 1.0 and
RabbitMQ Streams drivers, NATS for the NATS driver, core and JetStream (MQTT's restart is in
test_faults, Kafka's is not: tansu keeps nothing across one).

The RabbitMQ node runs beside the shared one under another name and ports, as the rabbitmq user
(Debian's rabbitmq-server switches to it), with the AMQP 1.0 and stream plugins. `rabbitmqctl
stop_app` then `start_app` is its restart: every connection drops, the listeners close and come
back. The NATS server is stopped (SIGTERM) and started again on its port, its JetStream store
kept. The streams a test makes go with its broker.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.outage import outage
from support.private_nats import NatsServer
from support.private_nats import private_nats as private_nats_server
from support.private_rabbitmq import RabbitNode
from support.private_rabbitmq import private_rabbitmq as private_node
from support.processes import Daemons
from support.runs import run_with

from coordinator import Fail, FixedRateTest

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq, pytest.mark.nats]


@pytest.fixture(scope="module")
def private_rabbitmq() -> Iterator[RabbitNode]:
    """A RabbitMQ node started for this module."""
    with private_node(("rabbitmq_amqp1_0", "rabbitmq_stream")) as node:
        yield node


@pytest.fixture(scope="module")
def private_nats() -> Iterator[NatsServer]:
    """A NATS server with JetStream started for this module."""
    with private_nats_server() as server:
        yield server


def _restart_after(
    stop: Callable[[], object], start: Callable[[], object], delay_s: float, down_s: float, times: list[str]
) -> threading.Thread:
    """Stop and start the broker in a thread; `times` gains when each step began and ended (wall
    clock), for a failure to show how long a loaded machine's `rabbitmqctl` took."""

    def restart() -> None:
        time.sleep(delay_s)
        for what, step in (("stop", stop), ("down", lambda: time.sleep(down_s)), ("start", start)):
            began = time.time()
            step()
            times.append(f"{what} {began:.1f}-{time.time():.1f}")

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    return thread


def _rabbitmqctl(node: str, command: str) -> Callable[[], object]:
    return lambda: subprocess.run(["rabbitmqctl", "-n", node, command], capture_output=True, timeout=60, check=True)


def _under_test(scheme: str, request: pytest.FixtureRequest) -> tuple[str, Callable[[], object], Callable[[], object]]:
    """The scheme's send URL on its broker of this module, and how to stop and start that broker."""
    queue = f"restart-{scheme}-{uuid.uuid4().hex[:6]}"
    if scheme.startswith("nats"):
        nats: NatsServer = request.getfixturevalue("private_nats")
        url = nats.url(queue.replace("-", "."))
        return (f"{url}?jetstream=true" if scheme == "nats-jetstream" else url), nats.stop, nats.start
    rabbit: RabbitNode = request.getfixturevalue("private_rabbitmq")
    port = rabbit.port
    send_url = {
        "amqp": f"amqp://guest:guest@127.0.0.1:{port}/{queue}?durable=true",
        "amqp10": f"amqp10://guest:guest@127.0.0.1:{port}//queue/{queue}",
        "rabbitmq-stream": f"rabbitmq-stream://guest:guest@127.0.0.1:{rabbit.stream_port}/{queue}",
    }[scheme]
    return send_url, _rabbitmqctl(rabbit.node, "stop_app"), _rabbitmqctl(rabbit.node, "start_app")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scheme", ["amqp", "amqp10", "rabbitmq-stream", "nats", "nats-jetstream"])
def test_workers_ride_out_a_broker_restart_and_count_what_it_lost(
    scheme: str,
    request: pytest.FixtureRequest,
    daemons: Daemons,
    data_server: tuple[str, Path],
) -> None:
    url, root = data_server
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    send_url, stop, start = _under_test(scheme, request)
    # The restart begins 6 s after the test does, its load a few seconds in. Each `rabbitmqctl`
    # boots a VM of its own: on a loaded CI machine, stop, 2 s down, start and the clients'
    # return took until 16 s into the load (a gap of 9.8 s), so the load lasts 26 s and
    # messages are still due after the gap.
    test = FixedRateTest(send_url=send_url, rate=50, duration="26s", fail=Fail(max_loss_ratio=1.0))
    times: list[str] = []
    restart = _restart_after(stop, start, delay_s=6.0, down_s=2.0, times=times)
    result = run_with(daemons, url, test, peers=2)
    restart.join(60)
    assert result.passed, result.reason
    s = result.summary.to_json()
    # Every scheduled message went once: the sender retries a send that found the connection
    # down, and a message in flight when it dropped (unconfirmed) is sent all the same, its
    # fate counted as an error of its kind. What did not arrive is counted by sequence numbers.
    sender = json.loads((root / result.test_id / "sender" / "s1" / "peer.json").read_text())
    assert s["sent"] == 1300, sender["errors"]
    assert sender["errors"].get("disconnected", 0) >= 1, "the sender never saw the restart"
    assert sender["errors"]["disconnected"] == sender["retries"]
    assert s["received"] + s["lost"] == s["sent"]
    # The gap shows in the receiver's rate file; the loss is at most what was due during it
    # (a durable queue keeps what it confirmed), and what was meant to go after it arrived.
    test_dir = root / result.test_id
    gone = outage([test_dir / "sender" / "s1"], [test_dir / "receiver" / "r1"])
    assert gone.gap_s >= 1.5, (gone, times)  # 2 s down, seen as at least 1.5 s without arrivals
    assert s["lost"] <= 50 * gone.gap_s + 1, (s["lost"], gone, times)
    assert gone.due_after >= 50 and gone.arrived_after >= 0.9 * gone.due_after, (gone, times)

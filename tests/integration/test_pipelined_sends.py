"""#13's done-when: confirmed sends at 100 msg/s through a path 20 ms longer keep their schedule.

A send that waited for each acknowledgement would manage 1 / (40 ms round trip) = 25 msg/s
through the delay and fall ever further behind; pipelined, every protocol keeps the rate, the
test succeeds, and the median latency rises by the 20 ms the path added, no more.

The senders go through the agent's fault proxy (in a process of its own), the receivers
straight to the broker. Kafka is the exception: tansu advertises one address, so its consumer
goes through the proxy too, and its fetches add a round trip of their own (asserted separately
below). The proxy is the nearest real thing to a slower network that needs no root.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from support.jetstream import delete_stream
from support.processes import Daemons
from support.proxy_process import ProxyProcess
from support.rabbit_queues import declare_queue, delete_queue
from support.runs import run_with

from coordinator import Fail, FixedRateTest
from coordinator.running.local import LocalCluster
from protocol.embedded_broker import free_port

_DELAY_MS = 20.0
_FETCH_WAIT_MS = 10


def _p50_ms(daemons: Daemons, data_server: str, send_url: str, receive_url: str) -> float:
    test = FixedRateTest(
        send_url=send_url,
        receive_url=receive_url,
        rate=100,
        duration="4s",
        warm_up="1s",
        fail=Fail(max_loss_ratio=0.0),
    )
    result = run_with(daemons, data_server, test, peers=2)
    assert result.passed, result.reason
    summary = result.summary.to_json()
    assert summary["lost"] == 0 and summary["duplicates"] == 0
    assert summary["sent"] == 400 and summary["received"] == 400
    # The schedule held: no message left late by more than a few ms (a closed loop is 40 ms+).
    (sender,) = [p for p in summary["peers"] if p["role"] == "sender"]
    assert "generator_bound" not in sender, sender
    return float(summary["latency_us"]["p50"]) / 1000


def _before_and_with_the_delay(
    daemons: Daemons, data_server: str, proxy: ProxyProcess, urls: tuple[str, str]
) -> tuple[float, float]:
    """The p50 through the proxy as it is, then with the delay (urls: send, receive). The base is
    the mean of a run before the delay and one after it: on a busy 2-core machine one base run
    read 3.9 ms where the rest read about 2, and the rise came out 18.3 ms."""
    before = _p50_ms(daemons, data_server, *urls)
    proxy.set_latency(_DELAY_MS)
    delayed = _p50_ms(daemons, data_server, *urls)
    proxy.set_latency(0.0)
    after = _p50_ms(daemons, data_server, *urls)
    return (before + after) / 2, delayed


def _workers(daemons: Daemons) -> None:
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")


CASES = {
    "mqtt-qos1": ("mqtt://127.0.0.1:{port}/maestro/pipe-{id}?qos=1", 1883),
    "amqp-confirms": ("amqp://guest:guest@127.0.0.1:{port}/pipe-{id}?confirms=true", 5672),
    "amqp10-at-least-once": ("amqp10://guest:guest@127.0.0.1:{port}//queue/pipe-{id}?settle=at-least-once", 5672),
    # load_balancer: every connection through the URL's address, the proxy; without it the
    # publisher would connect to the address the stream's leader advertises, past the proxy.
    "rabbitmq-stream": ("rabbitmq-stream://guest:guest@127.0.0.1:{port}/pipe-{id}?load_balancer=true", 5552),
    # Published with JetStream's acknowledgement, read through a pull consumer.
    "nats-jetstream": ("nats://127.0.0.1:{port}/pipe.{id}?jetstream=true&stream=pipe-{id}", 4222),
}


@pytest.mark.quiet
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("mosquitto_url", "rabbitmq")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_confirmed_send_through_20_ms_more_keeps_its_rate_and_adds_20_ms(
    case: str, daemons: Daemons, data_server: tuple[str, Path], request: pytest.FixtureRequest
) -> None:
    template, broker_port = CASES[case]
    url, _root = data_server
    test_id = uuid.uuid4().hex[:8]
    if case.startswith("amqp10"):
        declare_queue(f"pipe-{test_id}")  # RabbitMQ's AMQP 1.0 address /queue/NAME needs the queue
    if case.startswith("rabbitmq-stream"):
        request.getfixturevalue("rabbitmq_stream")
        request.addfinalizer(lambda: delete_queue(f"pipe-{test_id}"))  # a stream is a queue to AMQP 0-9-1
    if case.startswith("nats"):
        request.getfixturevalue("nats")
        request.addfinalizer(lambda: delete_stream(f"pipe-{test_id}"))  # with its consumer
    _workers(daemons)
    readings = []
    with ProxyProcess(broker_port) as proxy:
        through = template.format(port=proxy.port, id=test_id)
        direct = template.format(port=broker_port, id=test_id)
        # The bound is the (20 ms +- 5 %, 1 ms), and a median of a few ms on a shared
        # machine moves by that much: one CI run's base read 3.86 ms where others read about 2.
        # So a miss is measured once more, and the test fails only if both miss.
        for _ in range(2):
            base, delayed = _before_and_with_the_delay(daemons, url, proxy, (through, direct))
            readings.append(f"p50 {base:.2f} ms -> {delayed:.2f} ms (+{delayed - base:.2f})")
            print(f"{case}: {readings[-1]}")  # shown with pytest -s
            if abs(delayed - base - _DELAY_MS) <= 0.05 * _DELAY_MS:
                break
    assert abs(delayed - base - _DELAY_MS) <= 0.05 * _DELAY_MS, "; ".join(readings)


@pytest.mark.quiet
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("mosquitto_url")
def test_kafka_acks_all_through_20_ms_more_keeps_its_rate(
    daemons: Daemons, data_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _root = data_server
    port = free_port()
    with ProxyProcess(port) as proxy, LocalCluster(tmp_path / "tansu", broker_url="unused") as local:
        # Advertised as the proxy: every connection after the bootstrap goes through it.
        local.tansu(port=port, advertised_port=proxy.port)
        _workers(daemons)
        topic = f"pipe-{uuid.uuid4().hex[:8]}"
        # With a 1 ms fetch wait, tansu 0.6 on a slower machine answered most fetches with one
        # batch (one message here): one per 40 ms round trip, 25 msg/s of the 100 sent.
        kafka = f"kafka://127.0.0.1:{proxy.port}/{topic}?acks=all&fetch_wait_max_ms={_FETCH_WAIT_MS}"
        base, delayed = _before_and_with_the_delay(daemons, url, proxy, (kafka, kafka))
    # The produce request's 20 ms, the fetch response's 20 ms, and the wait at the broker for
    # the consumer's next fetch, which comes once per round trip through the proxy (40 ms and
    # the fetch wait): 0 to 50 ms, where the median falls depends on how the 10 ms send
    # schedule lines up with that cycle. What is asserted is the range, and (above) the rate.
    rise = delayed - base
    print(f"kafka: p50 {base:.2f} ms -> {delayed:.2f} ms (+{rise:.2f})")  # shown with pytest -s
    assert 2 * _DELAY_MS * 0.95 <= rise <= (4 * _DELAY_MS + _FETCH_WAIT_MS) * 1.05, (
        f"p50 {base:.2f} ms -> {delayed:.2f} ms"
    )

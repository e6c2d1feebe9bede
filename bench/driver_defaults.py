"""Where a driver departs from its client library's default for speed, the two side by side.

Each case runs the driver twice against the local brokers, once with the library's default and
once with the driver's own, through the URL option that sets it, and prints the rate:

- MQTT QoS 1 (Mosquitto, 127.0.0.1:1883): messages confirmed per second by one client that keeps
  `max_inflight` publishes unacknowledged (paho's default 20; the driver's 1,000), direct and
  through the agent's fault proxy delaying each way by `--latency-ms` (a round trip of a WAN's).
- AMQP 0-9-1 (RabbitMQ, 127.0.0.1:5672): a queue of 50,000 messages drained by one consumer
  with manual acks, with `prefetch` 0 (no basic.qos, aio-pika's and RabbitMQ's default:
  unbounded) and 100 (the driver's).
- AMQP 1.0 (RabbitMQ's AMQP 1.0 plugin): the same drain over a link given `credit` 10
  (python-qpid-proton's MessagingHandler prefetch) and 100 (the driver's).

Prints figures; asserts nothing (these machines are shared and noisy). Each pair is run
`--rounds` times, alternating, so a noisy moment does not fall on one side only.

    python bench/driver_defaults.py [--rounds 3] [--messages 50000] [--seconds 3] [--only mqtt]
    python bench/driver_defaults.py --smoke    # one short round: that it still runs
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker.drivers import parse_endpoint
from worker.drivers.base import Driver, SendError

_BODY = b"x" * 64


def _driver(url: str) -> Driver:
    cls, endpoint = parse_endpoint(url, "send_url")
    return cls(endpoint, 0)


async def confirmed_rate(url: str, seconds: float) -> float:
    """Messages the broker confirmed per second, the driver's window kept full."""
    driver = _driver(url)
    window, state = driver.window(), {"in_flight": 0, "settled": 0}
    room = asyncio.Event()

    def settled(count: int, error: SendError | None) -> None:
        state["in_flight"] -= count
        state["settled"] += count
        room.set()

    driver.on_settled = settled
    await driver.connect()
    await driver.start_sending()
    token, started = 0, time.perf_counter()
    end = started + seconds
    while time.perf_counter() < end:
        free = window - state["in_flight"]
        if free <= 0:
            room.clear()
            await room.wait()
            continue
        done = driver.publish_many((_BODY for _ in range(min(free, 256))), token)
        token += done.handed
        state["in_flight"] += done.handed
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    await driver.close()
    return state["settled"] / elapsed


async def drain_rate(send_url: str, receive_url: str, messages: int) -> float:
    """Messages per second one receiver takes from a queue that holds `messages` already."""
    sender = _driver(send_url)
    written = {"count": 0, "wanted": 0}
    caught_up = asyncio.Event()

    def settled(count: int, error: SendError | None) -> None:
        written["count"] += count
        if written["count"] >= written["wanted"]:
            caught_up.set()

    async def written_up_to(wanted: int) -> None:
        written["wanted"] = wanted
        if written["count"] < wanted:
            caught_up.clear()
            await caught_up.wait()

    sender.on_settled = settled
    await sender.connect()
    await sender.start_sending()
    for first in range(0, messages, 1000):
        sender.publish_many((_BODY for _ in range(1000)), first)
        await written_up_to(first)  # a window of 1,000-2,000
    await written_up_to(messages)
    await sender.close()
    receiver = _driver(receive_url)
    await receiver.connect()
    got = asyncio.Event()
    state = {"count": 0}

    def on_messages(batch: Sequence[tuple[bytes, int]]) -> None:
        state["count"] += len(batch)
        if state["count"] >= messages:
            got.set()

    started = time.perf_counter()
    await receiver.receive(on_messages)
    await asyncio.wait_for(got.wait(), 120)
    elapsed = time.perf_counter() - started
    await receiver.close()
    return messages / elapsed


def _latency_proxy(upstream_port: int, latency_ms: float) -> Any:
    """The agent's fault proxy in a process of its own (tests/support), delaying each way."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    proxy = importlib.import_module("tests.support.proxy_process").ProxyProcess(upstream_port)
    proxy.set_latency(latency_ms)
    return proxy


async def main(rounds: int, messages: int, seconds: float, latency_ms: float, only: str) -> None:
    rabbit = "guest:guest@127.0.0.1:5672"
    cases: list[tuple[str, str, list[tuple[str, str]]]] = []
    for label, option in (("paho default", "20"), ("driver", "1000")):
        topic = f"maestro/bench-{uuid.uuid4().hex[:8]}"
        url = f"mqtt://127.0.0.1:1883/{topic}?qos=1&max_inflight={option}"
        cases.append(("mqtt qos1 max_inflight", f"{label} {option}", [(url, "")]))
    for label, option in (("library default", "0"), ("driver", "100")):
        queue = f"bench-prefetch-{option}"
        send = f"amqp://{rabbit}/{queue}?confirms=false"
        cases.append(("amqp prefetch", f"{label} {option}", [(send, f"amqp://{rabbit}/{queue}?prefetch={option}")]))
    for label, option in (("proton default", "10"), ("driver", "100")):
        queue = f"bench-credit-{option}"
        send = f"amqp://{rabbit}/{queue}?confirms=false"  # declares the queue; AMQP 1.0 reads it
        cases.append(
            ("amqp10 credit", f"{label} {option}", [(send, f"amqp10://{rabbit}//queue/{queue}?credit={option}")])
        )
    proxy = _latency_proxy(1883, latency_ms)
    for label, option in (("paho default", "20"), ("driver", "1000")):
        topic = f"maestro/bench-{uuid.uuid4().hex[:8]}"
        url = f"mqtt://127.0.0.1:{proxy.port}/{topic}?qos=1&max_inflight={option}"
        cases.append((f"mqtt qos1 +{latency_ms:g} ms each way", f"{label} {option}", [(url, "")]))
    cases = [case for case in cases if only in case[0]]
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, setting, ((url, receive_url),) in cases:
            if receive_url:
                rate = await drain_rate(url, receive_url, messages)
            else:
                rate = await confirmed_rate(url, seconds)
            results.setdefault((name, setting), []).append(rate)
    proxy.close()
    await _delete_queues(
        rabbit,
        [f"bench-{kind}-{n}" for kind, n in (("prefetch", 0), ("prefetch", 100), ("credit", 10), ("credit", 100))],
    )
    for (name, setting), rates in results.items():
        figures = ", ".join(f"{rate:,.0f}" for rate in rates)
        print(f"{name:28} {setting:22} msg/s: {figures}")


async def _delete_queues(rabbit: str, queues: list[str]) -> None:
    """The drain cases' queues, gone again from the shared broker."""
    import aio_pika  # noqa: PLC0415 - the bench's own clean-up, beside the drivers'

    connection = await aio_pika.connect(f"amqp://{rabbit}/")
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--latency-ms", type=float, default=5.0, help="the proxied MQTT case's delay each way")
    parser.add_argument("--only", default="", help="the cases whose name holds this")
    parser.add_argument("--smoke", action="store_true", help="one short round: that it still runs")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.messages, args.seconds = 1, 2000, 0.5
    asyncio.run(main(args.rounds, args.messages, args.seconds, args.latency_ms, args.only))

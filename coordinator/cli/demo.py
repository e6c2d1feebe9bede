"""`maestro demo`: a short fixed-rate test on this machine, nothing else needed."""

from __future__ import annotations

import argparse
import socket
import sys
import uuid
from typing import Any
from urllib.parse import urlsplit

from coordinator.cli.support import add_where, conclude, given_broker, given_data_server, live_page, report
from coordinator.definitions import FixedRateTest, workload
from coordinator.outcome.results import new_test_id
from coordinator.running.local import LocalCluster, LocalError
from coordinator.running.maestro import Maestro
from protocol.secrets import redact_text

__all__ = ["add_demo", "cmd_demo", "demo_inspectors"]


def add_demo(commands: Any) -> None:
    p = commands.add_parser(
        "demo",
        help="a short fixed-rate test on this machine, nothing else needed",
        description="Start an embedded control broker, the data server, a sender and a receiver, a SUT that ships "
        "with the Python packages (tansu, a Kafka-compatible broker; the embedded MQTT broker where tansu is not "
        "available), an inspector and an agent, run a short fixed-rate test, write the report and print where "
        "the results are.",
    )
    p.add_argument(
        "--sut",
        help="a real SUT URL instead (amqp://, amqp10://, kafka://, mqtt://, rabbitmq-stream://, nats://; "
        "a stream is read whole by each receiving client: give each its own with %%d and destinations=1-N)",
    )
    p.add_argument("--rate", type=float, default=100.0, help="msg/s per client (default: %(default)s)")
    p.add_argument("--parallel", type=int, default=2, help="clients (default: %(default)s)")
    p.add_argument("--duration", default="15s", help="how long the load runs (default: %(default)s)")
    p.add_argument("--warm-up", default="3s", help="time left out of the figures (default: %(default)s)")
    add_where(p, local_flag=False)
    p.set_defaults(run=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    # The daemons and services of any --local run (Maestro.local), named for the demo, with a SUT.
    root = args.data.resolve()
    test_id = f"demo-{new_test_id()}"
    given = given_data_server(args)
    with Maestro.local(
        2,
        inspectors=1,
        # An agent with no configuration: it joins the test and may touch nothing.
        agents=("demo-agent",),
        data=root,
        broker=given_broker(args),
        topic_prefix=args.topic_prefix,
        data_server=given,
        name="demo",
    ) as maestro:
        local = maestro.local_cluster
        print(f"control broker: {local.broker_url}", flush=True)
        sut = args.sut or _demo_sut(local, args.parallel)
        print(f"SUT:            {redact_text(sut)}", flush=True)  # a console ends up in CI logs
        data_server = maestro.data_server_url()
        print(f"data server:    {data_server}" + ("" if given else f" (files under {root})"), flush=True)
        test = FixedRateTest(
            send_url=sut,
            rate=args.rate,
            parallel=args.parallel,
            size=256,
            duration=args.duration,
            warm_up=args.warm_up,
            name="maestro demo",
            labels={"demo": True},
            inspectors=demo_inspectors(sut),
            agents=("demo-agent",),
            options={"inspector_interval_s": 1},
        )
        print(f"inspectors:     {', '.join(i.split('=')[0] for i in test.inspectors)}", flush=True)
        print(f"workload:       {workload(test)}", flush=True)
        print(f"test id:        {test_id}", flush=True)
        print(f"live:           {live_page(data_server, test, test_id)}", flush=True)
        result = maestro.run(test, test_id=test_id, progress=not args.quiet, log_interval_s=args.log_interval)
        dead = maestro.dead_local_processes()
    print(result)
    return conclude("demo", result, report(result, None if given else root, args.no_report), dead)


def demo_inspectors(sut: str) -> tuple[str, ...]:
    """The host, and the inspector that fits the SUT where there is one: RabbitMQ's management
    API for amqp:// and rabbitmq-stream:// (on its default port, with the SUT URL's
    credentials), and a NATS server's monitoring port (8222) for nats:// where it answers."""
    parts = urlsplit(sut)
    if parts.scheme in ("amqp", "amqps", "rabbitmq-stream", "rabbitmq-stream+tls"):
        user = f"{parts.username or 'guest'}:{parts.password or 'guest'}@"
        return (f"rabbitmq=http://{user}{parts.hostname}:15672", "host")
    if parts.scheme in ("nats", "nats+tls") and parts.hostname and _answers(parts.hostname, _NATS_MONITORING):
        return (f"nats=http://{parts.hostname}:{_NATS_MONITORING}", "host")
    return ("host",)


_NATS_MONITORING = 8222  # nats-server -m 8222, the port its documentation uses


def _answers(host: str, port: int) -> bool:
    """Whether something listens on host:port (a NATS server runs without monitoring unless
    told: an inspector that could only fail is left out)."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def _demo_sut(local: LocalCluster, consumers: int) -> str:
    try:
        # A partition per consumer, or all but one of them would idle. tansu does not answer a
        # waiting fetch when data arrives, so librdkafka's 500 ms fetch.wait.max.ms would be the
        # latency the demo shows: a 2 ms wait makes it the broker's own. A partition per
        # producer too (partitioner=client): tansu can make two producers' batches on one
        # partition visible out of offset order, and a fetch then skips one (worker.drivers.kafka).
        # No producer linger: at the demo's 100 msg/s a client, librdkafka's 5 ms made most of
        # the latency shown (p50 8.6 ms against 3.3 ms without, in test_load's like run).
        topic = f"maestro-demo-{uuid.uuid4().hex[:6]}"
        query = f"partitions={consumers}&partitioner=client&linger_ms=0&fetch_wait_max_ms=2"
        return local.tansu() + f"/{topic}?{query}"
    except LocalError as exc:
        print(f"no tansu here ({exc}); the embedded MQTT broker serves as the SUT", file=sys.stderr)
        return f"{local.broker_url}/maestro/demo/{uuid.uuid4().hex[:6]}"

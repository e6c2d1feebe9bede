"""No password from any URL reaches a file a test leaves, or a log (#15, item 5).

One test drives AMQP 0-9-1, AMQP 1.0 and MQTT with credentials, a RabbitMQ management
inspector with credentials, and a control broker URL with credentials; then every file under
the results folder (peers' files, test.json, junit.xml, the report, the local daemons' logs)
is searched for the password. RabbitMQ gets a user of the test's own with a password nothing
else contains. Kafka has a test of its own: tansu, the Kafka-compatible broker here, has no
SASL, so that test fails at the connection, and what it leaves is searched the same way.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.rabbit_queues import declare_queue

from coordinator import FixedRateTest, Flow, Maestro
from reports.report import build_report
from reports.series import spark_session

USER = f"maestro-secret-{uuid.uuid4().hex[:6]}"
PASSWORD = f"pw-{uuid.uuid4().hex}"


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "--quiet", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def rabbit_user(rabbitmq: None) -> Iterator[str]:
    _rabbitmqctl("add_user", USER, PASSWORD)
    try:
        _rabbitmqctl("set_permissions", "-p", "/", USER, ".*", ".*", ".*")
        _rabbitmqctl("set_user_tags", USER, "monitoring")  # the management API's overview and queues
        yield USER
    finally:
        _rabbitmqctl("delete_user", USER)


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("mosquitto_url")
def test_no_password_reaches_any_file_or_log(rabbit_user: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    amqp10_queue = f"secret-amqp10-{tag}"
    declare_queue(amqp10_queue, f"amqp://{USER}:{PASSWORD}@127.0.0.1:5672/")
    credentials = f"{rabbit_user}:{PASSWORD}@127.0.0.1"
    test = FixedRateTest(
        send_url=f"amqp://{credentials}:5672/secret-amqp-{tag}",
        rate=20,
        duration="4s",
        flows=(
            Flow(f"amqp://{credentials}:5672/secret-amqp-{tag}"),
            Flow(f"amqp10://{credentials}:5672//queue/{amqp10_queue}"),
            Flow(f"mqtt://{credentials}:1883/maestro/secret-{tag}?qos=1"),
        ),
        inspectors=(f"rabbitmq=http://{credentials}:15672",),
        options={"inspector_interval_s": 1},
    )
    results = tmp_path / "results"
    broker = f"mqtt://{rabbit_user}:{PASSWORD}@127.0.0.1:1883"  # Mosquitto here takes any credentials
    with Maestro.local(workers=6, inspectors=1, data=results, broker=broker, topic_prefix=f"/mpt-{tag}") as maestro:
        result = maestro.run(test, progress=False)
    assert result.passed, result.reason
    assert result.summary["received"] == result.summary["sent"] == 3 * 80
    spark = spark_session()
    try:
        build_report(spark, results / result.test_id)  # the report too must be clean
    finally:
        spark.stop()
    files = [p for p in results.rglob("*") if p.is_file()]
    # The peers' files, the test's records, the report, and the local daemons' logs are all here.
    names = {p.name for p in files}
    assert {"test.json", "junit.xml", "peer.json", "index.html", "rabbitmq-queues.csv"} <= names
    assert any(p.suffix == ".log" for p in files)
    leaks = [str(p.relative_to(results)) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert leaks == []


@pytest.mark.timeout(180)
def test_a_kafka_url_with_credentials_leaves_no_password_even_when_the_broker_refuses(
    tansu: str, tmp_path: Path
) -> None:
    """tansu has no SASL, so a Kafka test with credentials cannot pass here; what it leaves
    behind, files, records and the daemons' logs with librdkafka's messages, is searched all
    the same."""
    host = tansu.removeprefix("kafka://")
    tag = uuid.uuid4().hex[:6]
    test = FixedRateTest(send_url=f"kafka://maestro:{PASSWORD}@{host}/secret-{tag}", rate=20, duration="4s")
    results = tmp_path / "results"
    with Maestro.local(workers=2, data=results, topic_prefix=f"/mpt-{tag}") as maestro:
        result = maestro.run(test, progress=False)
    assert not result.passed
    assert result.reason is not None and f"kafka://maestro:***@{host}/secret-{tag}" in result.reason, result.reason
    files = [p for p in results.rglob("*") if p.is_file()]
    assert {"test.json", "junit.xml"} <= {p.name for p in files} and any(p.suffix == ".log" for p in files)
    leaks = [str(p.relative_to(results)) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert leaks == []

"""No password from any URL reaches a file a test leaves, or a log (#15, item 5).

One test drives AMQP 0-9-1, AMQP 1.0 and MQTT with credentials, a RabbitMQ management
inspector with credentials, and a control broker URL with credentials; then every file under
the results folder (peers' files, test.json, junit.xml, the report, the local daemons' logs)
is searched for the password. RabbitMQ gets a user of the test's own with a password nothing
else contains. Kafka has a test of its own: tansu, the Kafka-compatible broker here, has no
SASL, so that test fails at the connection, and what it leaves is searched the same way.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import BIN
from support.rabbit_queues import declare_queue
from support.waiting import until_blocking

from coordinator import FixedRateTest, Flow, Maestro
from protocol.process_table import processes_naming
from reports.report import build_report
from reports.time_series import spark_session

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
    on_command_lines: set[int] = set()
    scans = []
    done = threading.Event()

    def read_ps() -> None:  # what `ps` shows every user: each process's command line
        while not done.wait(0.2):
            on_command_lines.update(processes_naming(PASSWORD))
            scans.append(1)

    with Maestro.local(workers=6, inspectors=1, data=results, broker=broker, topic_prefix=f"/mpt-{tag}") as maestro:
        reader = threading.Thread(target=read_ps)
        reader.start()
        try:
            result = maestro.run(test, progress=False)
        finally:
            done.set()
            reader.join()
    assert result.passed, result.reason
    # Seven daemons and a data server ran all along, and none had the password in its command line.
    assert on_command_lines == set() and len(scans) >= 10
    assert result.summary.received == result.summary.sent == 3 * 80
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


def _worker(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "maestro-worker"), *argv], capture_output=True, text=True, timeout=30, env=env, check=False
    )


@pytest.mark.usefixtures("mosquitto_url")
def test_a_daemon_takes_the_brokers_password_from_its_environment_or_a_private_file_only(tmp_path: Path) -> None:
    url = f"mqtt://someone:{PASSWORD}@127.0.0.1:1883"
    on_argv = _worker("--broker", url, "--name", "w1")
    assert on_argv.returncode == 2
    assert "the control broker's password is on the command line, where ps shows it" in on_argv.stderr
    assert PASSWORD not in on_argv.stderr and "Traceback" not in on_argv.stderr
    args = tmp_path / "w1.args"
    args.write_text(f"--broker\n{url}\n--name\nw1\n--data-dir\n{tmp_path / 'data'}\n")
    args.chmod(0o644)
    readable = _worker(f"@{args}")
    assert readable.returncode == 2 and f"which others may read (mode 0644): chmod 600 {args}" in readable.stderr
    # From a private file or the environment, it connects (Mosquitto here takes any credentials).
    args.chmod(0o600)
    env = {**os.environ, "MAESTRO_BROKER": url}
    for n, (argv, environment) in enumerate((([f"@{args}"], None), (["--data-dir", str(tmp_path / "data")], env))):
        log = tmp_path / f"worker-{n}.log"
        with log.open("wb") as out:
            daemon = subprocess.Popen([str(BIN / "maestro-worker"), *argv], stderr=out, env=environment)
        try:
            until_blocking(lambda log=log: "is up on" in log.read_text(), 20, f"the daemon's connection ({argv})")
        finally:
            daemon.terminate()
            daemon.wait(10)

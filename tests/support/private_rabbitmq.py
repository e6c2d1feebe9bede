"""A RabbitMQ node of a test's own, beside the shared one under another name and ports, as the
rabbitmq user (Debian's rabbitmq-server switches to it): for tests that restart a broker or need
a plugin the shared node must not be changed for (its MQTT plugin would take Mosquitto's 1883)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from coordinator.running.local import wait_for_port
from protocol.embedded_broker import free_port

__all__ = ["RabbitNode", "private_rabbitmq"]


@dataclass(frozen=True)
class RabbitNode:
    node: str  # for rabbitmqctl -n
    port: int  # AMQP 0-9-1, and AMQP 1.0 where its plugin is on
    mqtt_port: int | None = None
    stream_port: int | None = None


@contextmanager
def private_rabbitmq(plugins: tuple[str, ...] = ("rabbitmq_amqp1_0",)) -> Iterator[RabbitNode]:
    # Not under pytest's tmp folder: that is root's alone, and the node runs as rabbitmq.
    root = Path(tempfile.mkdtemp(prefix="maestro-rabbit-"))
    port, dist_port = free_port(), free_port()
    mqtt_port = free_port() if "rabbitmq_mqtt" in plugins else None
    stream_port = free_port() if "rabbitmq_stream" in plugins else None
    node = f"maestro-{uuid.uuid4().hex[:6]}@localhost"
    (root / "mnesia").mkdir()
    (root / "log").mkdir()
    (root / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
    config = f"listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n"
    if mqtt_port is not None:
        config += f"mqtt.listeners.tcp.1 = 127.0.0.1:{mqtt_port}\n"
    if stream_port is not None:
        # Advertised as reached: a stream client connects to the address its leader advertises
        # (by default this host's name and 5552, the shared node's port).
        config += f"stream.listeners.tcp.1 = 127.0.0.1:{stream_port}\n"
        config += f"stream.advertised_host = 127.0.0.1\nstream.advertised_port = {stream_port}\n"
    (root / "rabbitmq.conf").write_text(config)
    shutil.chown(root, "rabbitmq", "rabbitmq")
    for path in root.rglob("*"):
        shutil.chown(path, "rabbitmq", "rabbitmq")
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq"),
        "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
        "RABBITMQ_LOG_BASE": str(root / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
    }
    proc = subprocess.Popen(["rabbitmq-server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout_s=60)
        for plugin_port in (mqtt_port, stream_port):
            if plugin_port is not None:
                wait_for_port(plugin_port, timeout_s=60)
        yield RabbitNode(node, port, mqtt_port, stream_port)
    finally:
        subprocess.run(["rabbitmqctl", "-n", node, "stop"], capture_output=True, timeout=60, check=False)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)

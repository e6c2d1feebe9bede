"""The SUT URL schemes: one table, read by the option parser (which refuses any other scheme
before a daemon tries it), the worker's driver registry and each driver."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SUT_SCHEMES", "Scheme", "schemes_of"]


@dataclass(frozen=True)
class Scheme:
    driver: str  # "module:class", imported only when a URL with this scheme is used
    tls: bool
    default_port: int


SUT_SCHEMES: dict[str, Scheme] = {
    "amqp": Scheme("worker.drivers.amqp:AmqpDriver", False, 5672),
    "amqps": Scheme("worker.drivers.amqp:AmqpDriver", True, 5671),
    "amqp10": Scheme("worker.drivers.amqp10:Amqp10Driver", False, 5672),
    "amqp10s": Scheme("worker.drivers.amqp10:Amqp10Driver", True, 5671),
    "kafka": Scheme("worker.drivers.kafka:KafkaDriver", False, 9092),
    "kafkas": Scheme("worker.drivers.kafka:KafkaDriver", True, 9093),
    "mqtt": Scheme("worker.drivers.mqtt:MqttDriver", False, 1883),
    "mqtts": Scheme("worker.drivers.mqtt:MqttDriver", True, 8883),
    # The names and ports of RabbitMQ's own stream clients (its Java client, PerfTest's stream tool).
    "rabbitmq-stream": Scheme("worker.drivers.rabbit_stream:RabbitStreamDriver", False, 5552),
    "rabbitmq-stream+tls": Scheme("worker.drivers.rabbit_stream:RabbitStreamDriver", True, 5551),
    "nats": Scheme("worker.drivers.nats:NatsDriver", False, 4222),
    "nats+tls": Scheme("worker.drivers.nats:NatsDriver", True, 4222),  # NATS serves TLS on its one port
}


def schemes_of(driver: str) -> dict[str, tuple[bool, int]]:
    """A driver's schemes: scheme -> (TLS, default port)."""
    return {name: (s.tls, s.default_port) for name, s in SUT_SCHEMES.items() if s.driver == driver}

"""Inspectors by name, as START_INSPECTOR names them."""

from __future__ import annotations

from collections.abc import Callable

from inspector.amqp_management import AmqpManagementSource
from inspector.jolokia import JolokiaSource
from inspector.kafka import KafkaSource
from inspector.nats import NatsSource
from inspector.sources import HostSource, RabbitMqSource, Source

__all__ = ["SOURCES"]

SOURCES: dict[str, Callable[[str], Source]] = {
    "rabbitmq": RabbitMqSource,
    "host": HostSource,
    "jolokia": JolokiaSource,
    "amqp-management": AmqpManagementSource,
    "kafka": KafkaSource,
    "nats": NatsSource,
}

"""librdkafka's settings in effect: the driver's configuration over the library's own defaults,
read from the library itself (its `rd_kafka_conf_dump`; confluent-kafka exposes no dump), never
copied, so a report shows the linger, batch and fetch wait the client really ran with.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from confluent_kafka import cimpl

__all__ = ["in_effect"]

log = logging.getLogger(__name__)

# The settings that move a test's figures, named as Kafka's clients and this driver's docs name
# them, with where librdkafka keeps each and the name it dumps it under (an alias's canonical one).
_PRODUCER = {
    "acks": ("topic", "request.required.acks"),
    "linger.ms": ("global", "queue.buffering.max.ms"),
    "batch.num.messages": ("global", "batch.num.messages"),
    "batch.size": ("global", "batch.size"),
    "compression.type": ("global", "compression.codec"),
    "delivery.timeout.ms": ("topic", "message.timeout.ms"),
    "enable.idempotence": ("global", "enable.idempotence"),
    "max.in.flight.requests.per.connection": ("global", "max.in.flight.requests.per.connection"),
    "queue.buffering.max.messages": ("global", "queue.buffering.max.messages"),
    "queue.buffering.max.kbytes": ("global", "queue.buffering.max.kbytes"),
    "message.max.bytes": ("global", "message.max.bytes"),
    "socket.nagle.disable": ("global", "socket.nagle.disable"),
}
_CONSUMER = {
    "fetch.wait.max.ms": ("global", "fetch.wait.max.ms"),
    "fetch.min.bytes": ("global", "fetch.min.bytes"),
    "fetch.max.bytes": ("global", "fetch.max.bytes"),
    "max.partition.fetch.bytes": ("global", "fetch.message.max.bytes"),
    "queued.min.messages": ("global", "queued.min.messages"),
    "queued.max.messages.kbytes": ("global", "queued.max.messages.kbytes"),
    "enable.auto.commit": ("global", "enable.auto.commit"),
    "auto.commit.interval.ms": ("global", "auto.commit.interval.ms"),
    "session.timeout.ms": ("global", "session.timeout.ms"),
    "auto.offset.reset": ("topic", "auto.offset.reset"),
    "isolation.level": ("global", "isolation.level"),
    "partition.assignment.strategy": ("global", "partition.assignment.strategy"),
    "socket.nagle.disable": ("global", "socket.nagle.disable"),
}
_ERRSTR = 512


def in_effect(config: Mapping[str, Any], sending: bool) -> dict[str, str]:
    """The producer's (`sending`) or the consumer's settings above as librdkafka would run
    `config`: a value the driver gives as the library takes it, any other the library's default.
    Empty where the library cannot be read (then the report says "librdkafka's defaults")."""
    try:
        lib = _library()
        dumped = _dump(lib, config)
    except (OSError, AttributeError) as exc:  # another build of confluent-kafka: said, not guessed
        log.debug("librdkafka's configuration not read: %s", exc)
        return {}
    wanted = _PRODUCER if sending else _CONSUMER
    return {name: dumped[scope][key] for name, (scope, key) in wanted.items() if key in dumped[scope]}


@cache
def _library() -> ctypes.CDLL:
    # confluent-kafka's extension links librdkafka: its handle finds the library's symbols,
    # whichever copy (the wheel's own, or a system one) it was built against.
    lib = ctypes.CDLL(cimpl.__file__)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    dump_type = ctypes.POINTER(ctypes.c_char_p)
    _declare(lib.rd_kafka_conf_new, pointer, [])
    _declare(lib.rd_kafka_conf_set, ctypes.c_int, [pointer, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, size])
    _declare(lib.rd_kafka_conf_get_default_topic_conf, pointer, [pointer])
    _declare(lib.rd_kafka_topic_conf_new, pointer, [])
    _declare(lib.rd_kafka_topic_conf_destroy, None, [pointer])
    _declare(lib.rd_kafka_conf_dump, dump_type, [pointer, ctypes.POINTER(size)])
    _declare(lib.rd_kafka_topic_conf_dump, dump_type, [pointer, ctypes.POINTER(size)])
    _declare(lib.rd_kafka_conf_dump_free, None, [dump_type, size])
    _declare(lib.rd_kafka_conf_destroy, None, [pointer])
    return lib


def _declare(function: Any, restype: Any, argtypes: list[Any]) -> None:
    function.restype, function.argtypes = restype, argtypes


def _dump(lib: ctypes.CDLL, config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    conf = lib.rd_kafka_conf_new()
    try:
        error = ctypes.create_string_buffer(_ERRSTR)
        for key, value in config.items():
            if callable(value) or "password" in key:
                continue
            text = str(value).lower() if isinstance(value, bool) else str(value)
            # Keys only the Python client knows (delivery.report.only.error) are not librdkafka's.
            lib.rd_kafka_conf_set(conf, key.encode(), text.encode(), error, _ERRSTR)
        topic = lib.rd_kafka_conf_get_default_topic_conf(conf)
        fresh = topic is None  # no topic setting given: the library's topic defaults
        if fresh:
            topic = lib.rd_kafka_topic_conf_new()
        try:
            return {
                "global": _pairs(lib, lib.rd_kafka_conf_dump, conf),
                "topic": _pairs(lib, lib.rd_kafka_topic_conf_dump, topic),
            }
        finally:
            if fresh:
                lib.rd_kafka_topic_conf_destroy(topic)
    finally:
        lib.rd_kafka_conf_destroy(conf)


def _pairs(lib: ctypes.CDLL, dump: Callable[..., Any], conf: int) -> dict[str, str]:
    count = ctypes.c_size_t()
    array = dump(conf, ctypes.byref(count))
    try:
        return {array[i].decode(): array[i + 1].decode() for i in range(0, count.value - 1, 2)}
    finally:
        lib.rd_kafka_conf_dump_free(array, count)

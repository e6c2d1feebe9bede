"""Kafka through confluent-kafka's admin client: topics and partitions with their watermarks, and
each consumer group's committed offsets and lag.

`kafka` takes the bootstrap servers as a URL, `kafka://host:9092[,host2:9092]` (`kafkas://` for
TLS, `user:password@` for SASL PLAIN), and writes `partitions` (topic, partition, leader,
replicas, in-sync replicas, low and high watermarks, messages between them) and `groups` (group,
topic, partition, committed offset, high watermark, lag). Internal topics (`__...`) are left out.
Offsets are what the broker reports: a broker that numbers record batches rather than records
(tansu does, for batches of several records) reports its own numbers.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from inspector.sources import Row, Rows, Source, SourceError, redact

__all__ = ["KafkaSource"]

log = logging.getLogger(__name__)


@dataclass
class KafkaSource(Source):
    url: str
    timeout_s: float = 5.0
    name = "kafka"
    _admin: Any = field(default=None, init=False)
    _consumer: Any = field(default=None, init=False)
    _group: str = field(default_factory=lambda: f"maestro-inspector-{uuid.uuid4().hex[:8]}", init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url or "kafka://127.0.0.1:9092")
        if parts.scheme not in ("kafka", "kafkas") or not parts.netloc:
            raise SourceError(f"kafka: {redact(self.url)!r} is not a kafka(s):// URL")
        servers = parts.netloc.rsplit("@", 1)[-1]
        config: dict[str, Any] = {"bootstrap.servers": servers, "logger": log, "socket.timeout.ms": 10_000}
        if parts.username:
            config |= {
                "security.protocol": "SASL_SSL" if parts.scheme == "kafkas" else "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": unquote(parts.username),
                "sasl.password": unquote(parts.password or ""),
            }
        elif parts.scheme == "kafkas":
            config["security.protocol"] = "SSL"
        self._config = config
        self._where = f"kafka {redact(self.url)}"

    def _clients(self) -> tuple[Any, Any]:
        if self._admin is None:
            self._admin = AdminClient(self._config)
            # Never subscribes or commits: it only asks for watermarks, so it joins no group.
            self._consumer = Consumer({**self._config, "group.id": self._group, "enable.auto.commit": False})
        return self._admin, self._consumer

    def sample(self) -> Rows:
        admin, consumer = self._clients()
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
            partitions = []
            high: dict[tuple[str, int], int] = {}
            for topic in sorted(t for t in metadata.topics if not t.startswith("__")):
                for pid, p in sorted(metadata.topics[topic].partitions.items()):
                    low, hi = consumer.get_watermark_offsets(TopicPartition(topic, pid), timeout=self.timeout_s)
                    high[(topic, pid)] = hi
                    partitions.append(
                        {
                            "topic": topic,
                            "partition": pid,
                            "leader": p.leader,
                            "replicas": len(p.replicas),
                            "in_sync": len(p.isrs),
                            "low": low,
                            "high": hi,
                            "messages": hi - low,
                        }
                    )
            return {"partitions": partitions, "groups": self._groups(admin, high)}
        except KafkaException as exc:
            raise SourceError(f"{self._where}: {exc.args[0] if exc.args else exc}") from None

    def _groups(self, admin: Any, high: dict[tuple[str, int], int]) -> list[Row]:
        listed = admin.list_consumer_groups(request_timeout=self.timeout_s).result()
        rows = []
        for group in sorted(g.group_id for g in listed.valid if g.group_id != self._group):
            # One group per request: what librdkafka accepts.
            (future,) = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
            ).values()
            for tp in sorted(future.result().topic_partitions, key=lambda t: (t.topic, t.partition)):
                hi = high.get((tp.topic, tp.partition))
                committed = tp.offset if tp.offset >= 0 else None
                rows.append(
                    {
                        "group": group,
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "committed": committed,
                        "high": hi,
                        "lag": max(0, hi - committed) if hi is not None and committed is not None else None,
                    }
                )
        return rows

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._admin = self._consumer = None

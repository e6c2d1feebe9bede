"""ActiveMQ Classic and Artemis through Jolokia (seed 004 §3.3, §3.4): one bulk read per interval.

`jolokia` takes the Jolokia endpoint, e.g. `http://admin:admin@broker:8161/api/jolokia`, and
writes two data sets: `broker` (system load, file descriptors, free memory and swap, and the JVM's
memory pools: eden, survivor, tenured and metaspace, each initial/committed/max/used, plus heap
and non-heap) and `queues` (per destination: queue size, consumers, acknowledged, expired,
enqueued). A destination pattern that matches nothing answers 404 and means "none of these":
one request asks for both ActiveMQ Classic's and Artemis's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inspector.sources import HttpJson, Row, Rows, Source, SourceError
from protocol.json_value import JsonObject

__all__ = ["JolokiaSource"]

_OS_ATTRIBUTES = [
    "SystemLoadAverage",
    "OpenFileDescriptorCount",
    "MaxFileDescriptorCount",
    "FreePhysicalMemorySize",  # up to Java 13; FreeMemorySize after
    "FreeMemorySize",
    "FreeSwapSpaceSize",
    "CommittedVirtualMemorySize",
]
_CLASSIC = "org.apache.activemq:type=Broker,brokerName=*,destinationType=Queue,destinationName=*"
_CLASSIC_ATTRIBUTES = ["QueueSize", "ConsumerCount", "DequeueCount", "ExpiredCount", "EnqueueCount"]
_ARTEMIS = (
    "org.apache.activemq.artemis:broker=*,component=addresses,address=*,subcomponent=queues,routing-type=*,queue=*"
)
_ARTEMIS_ATTRIBUTES = ["MessageCount", "ConsumerCount", "MessagesAcknowledged", "MessagesExpired", "MessagesAdded"]
_REQUESTS: list[JsonObject] = [
    {"type": "read", "mbean": "java.lang:type=Memory", "attribute": ["HeapMemoryUsage", "NonHeapMemoryUsage"]},
    {"type": "read", "mbean": "java.lang:type=MemoryPool,name=*", "attribute": "Usage"},
    {"type": "read", "mbean": "java.lang:type=OperatingSystem", "attribute": _OS_ATTRIBUTES},
    {"type": "read", "mbean": _CLASSIC, "attribute": _CLASSIC_ATTRIBUTES},
    {"type": "read", "mbean": _ARTEMIS, "attribute": _ARTEMIS_ATTRIBUTES},
]
# Memory pool names by collector (G1, Parallel, Serial, CMS) -> the seed's four spaces.
_POOLS = (
    ("eden", ("Eden",)),
    ("survivor", ("Survivor",)),
    ("tenured", ("Old Gen", "Tenured")),
    ("pm", ("Metaspace", "Perm Gen")),
)
_USAGE = ("init", "committed", "max", "used")


@dataclass
class JolokiaSource(Source):
    url: str
    timeout_s: float = 5.0
    name = "jolokia"

    def __post_init__(self) -> None:
        self._http = HttpJson("jolokia", self.url or "http://127.0.0.1:8161/api/jolokia", self.timeout_s)

    def sample(self) -> Rows:
        answers = self._http.request("/", _REQUESTS)
        if not isinstance(answers, list) or len(answers) != len(_REQUESTS):
            raise SourceError(f"jolokia {self._http.base}: expected {len(_REQUESTS)} answers to a bulk read")
        memory, pools, system, classic, artemis = (self._value(a, i) for i, a in enumerate(answers))
        return {"broker": [self._broker(memory, pools, system)], "queues": _queues(classic, artemis)}

    def _value(self, answer: Any, index: int) -> Mapping[str, Any]:
        status = answer.get("status") if isinstance(answer, dict) else None
        if status == 404 and index >= 3:
            return {}  # no destinations of that broker kind
        if status != 200:
            error = answer.get("error", "no status") if isinstance(answer, dict) else "not an object"
            raise SourceError(f"jolokia {self._http.base}: {_REQUESTS[index]['mbean']}: {status} {error}")
        value = answer.get("value")
        return value if isinstance(value, dict) else {}

    @staticmethod
    def _broker(memory: Mapping[str, Any], pools: Mapping[str, Any], system: Mapping[str, Any]) -> Row:
        free_memory = system.get("FreeMemorySize", system.get("FreePhysicalMemorySize"))
        max_fds, open_fds = system.get("MaxFileDescriptorCount"), system.get("OpenFileDescriptorCount")
        row: Row = {
            "load": system.get("SystemLoadAverage"),
            "open_fds": open_fds,
            "free_fds": max_fds - open_fds if isinstance(max_fds, int) and isinstance(open_fds, int) else None,
            "free_memory": free_memory,
            "free_swap": system.get("FreeSwapSpaceSize"),
            "swap_committed": system.get("CommittedVirtualMemorySize"),
        }
        by_space: dict[str, Row] = {}
        for mbean, value in pools.items():
            pool = mbean.split("name=", 1)[-1].split(",")[0]
            usage = (value or {}).get("Usage") or {}
            for space, markers in _POOLS:
                if any(marker in pool for marker in markers) and space not in by_space:
                    by_space[space] = usage
        for space, _ in _POOLS:
            for field in _USAGE:
                row[f"{space}_{'initial' if field == 'init' else field}"] = by_space.get(space, {}).get(field)
        for kind, key in (("heap", "HeapMemoryUsage"), ("nonheap", "NonHeapMemoryUsage")):
            for field in ("committed", "max", "used"):
                row[f"{kind}_{field}"] = (memory.get(key) or {}).get(field)
        return row


def _properties(mbean: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in mbean.split(":", 1)[-1].split(",") if "=" in part)


def _queues(classic: Mapping[str, Any], artemis: Mapping[str, Any]) -> list[Row]:
    rows = []
    for mbean, v in sorted(classic.items()):
        p = _properties(mbean)
        rows.append(
            {
                "broker": p.get("brokerName", ""),
                "queue": p.get("destinationName", ""),
                "queue_size": v.get("QueueSize"),
                "consumers": v.get("ConsumerCount"),
                "acknowledged": v.get("DequeueCount"),
                "expired": v.get("ExpiredCount"),
                "enqueued": v.get("EnqueueCount"),
            }
        )
    for mbean, v in sorted(artemis.items()):
        p = _properties(mbean)
        rows.append(
            {
                "broker": p.get("broker", "").strip('"'),
                "queue": p.get("queue", "").strip('"'),
                "queue_size": v.get("MessageCount"),
                "consumers": v.get("ConsumerCount"),
                "acknowledged": v.get("MessagesAcknowledged"),
                "expired": v.get("MessagesExpired"),
                "enqueued": v.get("MessagesAdded"),
            }
        )
    return rows

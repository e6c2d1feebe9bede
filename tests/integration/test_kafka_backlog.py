"""A Kafka receiver behind a large backlog, against tansu: it reads on without a pause.

librdkafka fetches ahead into a local queue; once that holds `queued.min.messages` (100,000) it
stops fetching for `fetch.queue.backoff.ms`, 1 s by default. A receiver slower than the fetches
then read the queue dry and sat idle for most of that second: 840-880 ms in 3 of 5 runs over
200,000 messages (bench/README.md, session 17), a stall that a test's latency and rate would
show as the broker's.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import pytest
from support.worker_runs import drain, send_unbounded

from protocol.ratefile import read_rate_file

MESSAGES = 400_000


@pytest.mark.kafka
def test_a_receiver_behind_a_backlog_reads_it_without_a_pause(tansu: str, tmp_path: Path) -> None:
    topic = f"backlog-{uuid.uuid4().hex[:8]}"
    # Unbounded: the backlog is there before the receiver starts.
    send_unbounded(f"{tansu}/{topic}?partitions=1&acks=1&linger_ms=5", "t-backlog", "s1", MESSAGES, tmp_path / "sender")
    receiver = drain(f"{tansu}/{topic}?group=g-{topic}", "t-backlog", tmp_path / "receiver")
    assert receiver.stats.received == MESSAGES
    arrivals = sorted(ata for path in receiver.rate_file.paths for _, ata in read_rate_file(path))
    assert len(arrivals) == MESSAGES
    longest_us = max(later - earlier for earlier, later in itertools.pairwise(arrivals))
    # The whole backlog takes about half a second to read here; a fetch backoff, near a second.
    assert longest_us < 500_000, f"the receiver stood idle for {longest_us / 1000:.0f} ms inside the backlog"

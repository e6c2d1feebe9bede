"""Seed 002's workload shape, scaled down to one machine: many queues, many producers and
consumers, consumers that take 10 ms per message, publisher confirms.

The seed ran 100 queues, 200 producers and 200 consumers (`perf-test-%d`, 1..100). Here: 10
queues, 20 producers and 20 consumers (clients spread round-robin over the queues), a modest rate
each, so one machine carries it.

    maestro run examples/seed_002_many_queues.py
"""

from __future__ import annotations

import sys
import uuid

from coordinator import Fail, FixedRateTest, Maestro

PREFIX = f"maestro-s002-{uuid.uuid4().hex[:6]}"
# `%d` with destinations=1-10: client n uses queue n mod 10 (+1), on both sides.
SUT = f"amqp://guest:guest@127.0.0.1:5672/{PREFIX}-%d?destinations=1-10&confirms=true&prefetch=10"


def main() -> int:
    test = FixedRateTest(
        send_url=SUT,
        rate=20,  # per producer: 400 msg/s in all, under the consumers' 20 x 100 msg/s
        size=1024,
        parallel=20,
        duration="30s",
        warm_up="5s",
        options={"confirm_window": 10, "processing_delay_ms": 10},
        fail=Fail(latency_ms=1000, stall_s=15),
        name="seed 002 shape: 10 queues, 20 producers, 20 consumers, 10 ms consumers, confirms",
    )
    with Maestro.local(workers=2) as maestro:
        result = maestro.run(test)
    print(result)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())

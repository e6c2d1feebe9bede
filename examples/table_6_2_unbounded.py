"""Seed 004, Table 6.2, scaled down to one machine: unbounded rate, 256-byte messages,
5 clients, through RabbitMQ (AMQP 0-9-1) with publisher confirms.

    maestro run examples/table_6_2_unbounded.py                 # everything local
    maestro run --broker mqtt://lab:1883 --data-server http://lab:8080 examples/table_6_2_unbounded.py --lab

The thesis ran 5 minutes per point on lab hardware; 20 s on one machine keeps the shape (the
figure is the sustained receive rate and its latency) without the hours.
"""

from __future__ import annotations

import sys
import uuid

from coordinator import Maestro, UnboundedTest

SUT = f"amqp://guest:guest@127.0.0.1:5672/maestro-t62-{uuid.uuid4().hex[:6]}?confirms=true"


def main() -> int:
    test = UnboundedTest(
        send_url=SUT,
        size=256,
        parallel=5,
        duration="20s",
        warm_up="5s",
        options={"confirm_window": 100},
        name="seed 004 table 6.2: unbounded, 256 B, 5 clients",
    )
    lab = "--lab" in sys.argv
    with Maestro.connect() if lab else Maestro.local(workers=2) as maestro:
        result = maestro.run(test)
    print(result)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())

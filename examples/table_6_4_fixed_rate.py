"""Seed 004, Table 6.4, scaled down to one machine: first measure the maximum (an unbounded
run), then a fixed-rate run at 80 % of it, bounded by a message count instead of a time.

    maestro run examples/table_6_4_fixed_rate.py

The second run is the one whose latency the thesis reports: a broker at 80 % of its maximum
should keep a steady, low latency; a rising p99 at that load is a regression.
"""

from __future__ import annotations

import sys
import uuid

from coordinator import Fail, FixedRateTest, Maestro, UnboundedTest

SUT = f"amqp://guest:guest@127.0.0.1:5672/maestro-t64-{uuid.uuid4().hex[:6]}?confirms=true"
CLIENTS = 5


def main() -> int:
    with Maestro.local(workers=2) as maestro:
        probe = maestro.run(UnboundedTest(send_url=SUT, size=256, parallel=CLIENTS, duration="10s", warm_up="2s"))
        if not probe.passed:
            print(probe)
            return 1
        maximum = probe.summary.receive_rate.mean
        per_client = 0.8 * maximum / CLIENTS
        count = int(per_client * CLIENTS * 20)  # about 20 s at that rate
        print(f"measured maximum {maximum:,.0f} msg/s; running {count:,} messages at 80 %: {per_client:,.0f}/client")
        result = maestro.run(
            FixedRateTest(
                send_url=SUT,
                rate=per_client,
                size=256,
                parallel=CLIENTS,
                count=count,
                warm_up="2s",  # as the probe's: the maximum was measured after one too
                fail=Fail(min_rate_ratio=0.9),
                labels={"fraction_of_max": 0.8, "measured_max_per_s": round(maximum)},
                name="seed 004 table 6.4: fixed rate at 80 % of the maximum",
            )
        )
    print(result)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())

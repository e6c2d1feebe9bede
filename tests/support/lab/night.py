"""A night in the lab: tests of different kinds back to back, from one script, on daemons that
were started once and stay up, then the history of the nightly test. A nightly job runs it so:

    maestro run night.py --broker mqtt://lab-ctl:1883 --data-server http://lab-ctl:8080

$LAB_SUT is the SUT's AMQP URL (no path), $LAB_SUT_PROXY the same through the fault proxy
`sut-proxy` of the agent $LAB_AGENT, and $LAB_NIGHT tags the night's queues. It exits 1 if a test
failed (`maestro run` does), else with `maestro history`'s code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from coordinator import AbaTest, Action, FixedRateTest, IncrementalTest, Maestro, RequestReplyTest, UnboundedTest

NIGHTLY = "lab night"  # the test whose history the night ends with
SUT, PROXY, AGENT = os.environ["LAB_SUT"], os.environ["LAB_SUT_PROXY"], os.environ["LAB_AGENT"]
QUEUE = f"lab-night-{os.environ.get('LAB_NIGHT', 'n')}"
PEERS = 6  # 2 senders, 2 receivers, an inspector, an agent

nightly = FixedRateTest(
    send_url=f"{SUT}/{QUEUE}",
    rate=50,
    parallel=2,
    senders=2,
    receivers=2,
    duration="55s",
    name=NIGHTLY,
    inspectors=("host",),
    options={"inspector_interval_s": 1},
)
night = [
    nightly,
    RequestReplyTest(
        request_url=f"{SUT}/{QUEUE}-requests",
        reply_url=f"{SUT}/amq.rabbitmq.reply-to",
        clients=2,
        service_time="2ms",
        duration="6s",
        name="lab night request-reply",
    ),
    nightly,
    IncrementalTest(
        base=FixedRateTest(send_url=f"{SUT}/{QUEUE}-steps", duration="4s", name="lab night incremental"),
        initial_rate=100,
        ceiling_rate=300,
        rate_step=100,
    ),
    FixedRateTest(
        send_url=f"{PROXY}/{QUEUE}-fault",  # through the agent's proxy, which adds 20 ms for 3 s
        receive_url=f"{SUT}/{QUEUE}-fault",
        rate=50,
        duration="10s",
        agents=(AGENT,),
        actions=(Action("3s", AGENT, "latency", ("sut-proxy", "ms=20", "duration_s=3")),),
        name="lab night fault",
    ),
    UnboundedTest(send_url=f"{SUT}/{QUEUE}-unbounded", count=5000, senders=2, receivers=2, name="lab night unbounded"),
    # One build's check: the candidate is the same broker through the agent's proxy (no fault).
    AbaTest(
        base=(aba := FixedRateTest(send_url=f"{SUT}/{QUEUE}-aba", rate=50, duration="3s", name="lab night aba")),
        candidate=replace(aba, send_url=f"{PROXY}/{QUEUE}-aba", receive_url=f"{SUT}/{QUEUE}-aba"),
        times=2,
    ),
    nightly,
]

with Maestro.connect() as maestro:  # --broker and --data-server, through the environment
    maestro.wait_for_peers(PEERS, timeout_s=60)
    for test in night:
        print(maestro.run(test, progress=False), flush=True)

history = [
    str(Path(sys.executable).parent / "maestro"),
    "history",
    NIGHTLY,
    "--server",
    os.environ["MAESTRO_DATA_SERVER"],
]
sys.exit(subprocess.run(history, check=False).returncode)

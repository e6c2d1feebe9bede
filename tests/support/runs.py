"""Running a test from a coordinator in the integration tests."""

from __future__ import annotations

from coordinator import Maestro, TestResult
from coordinator.definitions import TestDefinition
from support.processes import Daemons


def run_with(daemons: Daemons, data_server: str, test: TestDefinition, peers: int) -> TestResult:
    """Run `test` from a coordinator on the daemons' control broker, once `peers` are up."""
    # Discovery too: peers that came up before this coordinator announced themselves unheard.
    with Maestro.connect(daemons.broker_url, topic_prefix=daemons.prefix, discover_s=1, data_server=data_server) as m:
        m.wait_for_peers(peers, timeout_s=20)
        return m.run(test, progress=False)

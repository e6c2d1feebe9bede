"""Running a test definition to its end: one phase for a fixed-rate test, a series of phases on
one cast for the others."""

from __future__ import annotations

from coordinator.bus.client import MaestroClient
from coordinator.definitions import FixedRateTest, TestDefinition
from coordinator.errors import stop_if_interrupted
from coordinator.outcome.results import TestResult, new_test_id
from coordinator.outcome.storage import ResultStore
from coordinator.running.cast import Cast
from coordinator.running.phase import Phase
from coordinator.running.series import run_series

__all__ = ["FINISHED", "run_test"]

# Every test this process ran, in order. Process-wide on purpose: `maestro run` executes a
# user's script, which builds its own Maestro, and exits non-zero when one of its tests failed.
FINISHED: list[TestResult] = []


def run_test(
    client: MaestroClient,
    test: TestDefinition,
    store: ResultStore,
    test_id: str | None = None,
    progress: bool = True,
    *,
    log_interval_s: float = 1.0,
) -> TestResult:
    stop_if_interrupted()  # a script whose test was interrupted ends here, not with its next test
    test_id = test_id or new_test_id()
    if isinstance(test, FixedRateTest):
        cast = Cast.choose(client, test)
        result = Phase(client, test, test_id, store, cast, progress, log_interval_s=log_interval_s).run()
    else:
        result = run_series(client, test, store, test_id, progress, log_interval_s=log_interval_s)
    FINISHED.append(result)
    return result

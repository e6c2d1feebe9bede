"""Rules for the whole suite."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skipped test proves nothing: a run with skips fails, as one that ran no test does."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"{skipped} test(s) skipped: failing the run (a skipped test proves nothing)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """Leaked sockets surface at garbage collection: collect here, so the test that leaked is the one that fails."""
    yield
    gc.collect()

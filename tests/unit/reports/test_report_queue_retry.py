"""A failed report is tried again when asked 30 s after it failed, whatever its build took."""

from __future__ import annotations

import pytest

from reports.report_queue import BuildState


@pytest.mark.parametrize(
    ("asked_at", "again"),
    [(101.0, False), (129.9, False), (130.1, True)],
)
def test_a_failed_build_is_tried_again_30_s_after_it_failed(asked_at: float, again: bool) -> None:
    # It took 40 s (Spark starting on a busy machine), so 30 s after its start had passed when it failed.
    failed = BuildState("failed", started_mono=60.0, ended_mono=100.0)
    assert failed.tried_again(asked_at) is again


@pytest.mark.parametrize("state", ["queued", "building", "done"])
def test_only_a_failed_build_is_tried_again(state: str) -> None:
    assert not BuildState(state, started_mono=0.0, ended_mono=0.0).tried_again(1e6)

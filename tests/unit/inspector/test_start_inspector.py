from __future__ import annotations

import asyncio
from pathlib import Path

from inspector.main import Inspector
from protocol.codes import Role
from protocol.notes import InternalErrorResponse, StartInspector
from protocol.runtime import PeerConfig


def test_an_interval_that_is_no_number_is_refused_with_its_name(tmp_path: Path) -> None:
    """A note's `interval_s` of a list or a word made float() raise inside the handler."""
    inspector = Inspector(
        PeerConfig(broker_url="mqtt://127.0.0.1:1", name="i1", role=Role.INSPECTOR, data_dir=tmp_path)
    )
    for bad in (["1"], "soon", True):
        note = StartInspector(inspector="host", options={"interval_s": bad})
        response = asyncio.run(inspector._answer(note))
        assert isinstance(response, InternalErrorResponse), bad
        assert "interval_s must be a number of seconds" in response.message


def test_an_interval_under_the_least_is_refused(tmp_path: Path) -> None:
    inspector = Inspector(
        PeerConfig(broker_url="mqtt://127.0.0.1:1", name="i1", role=Role.INSPECTOR, data_dir=tmp_path)
    )
    response = asyncio.run(inspector._answer(StartInspector(inspector="host", options={"interval_s": 0.5})))
    assert isinstance(response, InternalErrorResponse) and "at least 1" in response.message

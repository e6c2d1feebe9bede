from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from coordinator.cli.main import _warn_of_a_password_in


def test_a_password_on_maestros_command_line_is_warned_of_but_not_one_in_an_at_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _warn_of_a_password_in(argparse.Namespace(command="peers", broker="mqtt://u:hunter2@h:1883"))
    warned = capsys.readouterr().err
    assert "password is on this command line" in warned and "hunter2" not in warned
    url_file = tmp_path / "maestro.broker"
    url_file.write_text("mqtt://u:hunter2@h:1883\n")
    url_file.chmod(0o600)
    _warn_of_a_password_in(argparse.Namespace(command="peers", broker=f"@{url_file}"))
    assert capsys.readouterr().err == ""

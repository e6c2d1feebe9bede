"""peer.json is written and read by protocol.results alone, as notes are by protocol.codec: a
module that names the file reaches it through that module's records, never its own JSON."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("protocol", "coordinator", "worker", "inspector", "agent", "reports")


def _modules() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_only_the_results_module_reads_or_writes_peer_json_itself() -> None:
    offenders = []
    for path in _modules():
        if path == ROOT / "protocol" / "results.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # may speak of it
        names_the_file = any(
            isinstance(node, ast.Constant) and isinstance(node.value, str) and "peer.json" in node.value
            for node in ast.walk(tree)
            if id(node) not in docstrings
        )
        through_results = any(
            isinstance(node, ast.ImportFrom) and node.module == "protocol.results" for node in ast.walk(tree)
        )
        if names_the_file and not through_results:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_no_daemon_writes_a_peer_record_by_hand() -> None:
    # The old way: a dict merged into the peer's record and dumped as JSON.
    for path in _modules():
        text = path.read_text()
        assert "peer_record() |" not in text and "write_peer_json(directory, info)" not in text, path

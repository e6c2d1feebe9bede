"""User handlers: where they come from (configured directories, and sources fetched by
AGENT_SOURCE: a git repository at a branch or tag, or a local directory), and how one runs.

A handler is an executable file, run with the note's arguments as its argv, or a Python file
`NAME.py` with a function `handle(context)`, run by the agent's Python in a process of its own;
`context` is a dict: command, args, test_id, options (the test's), agent. Its return value, when
an int, is the exit code. Either way the agent enforces the timeout and reports the exit code,
the duration and the tail of the output (seed 004 §5.2.2, §7.5: handlers in any language).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from protocol.json_value import JsonObject
from protocol.runtime import PeerError, UnsupportedError

__all__ = ["HandlerSources", "find_handler", "handler_argv"]

_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}")
_CLONE_TIMEOUT_S = 120.0

# Runs a `handle(context)` file: the file, then the context as JSON, on the command line.
_PYTHON_RUNNER = """
import importlib.util, json, sys
path, context = sys.argv[1], json.loads(sys.argv[2])
spec = importlib.util.spec_from_file_location("maestro_handler", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
handle = getattr(module, "handle", None)
if not callable(handle):
    sys.exit(f"{path}: no handle(context) function")
result = handle(context)
sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)
"""


class HandlerSources:
    """The source fetched at run time (one at a time, as in Maestro Java: a new AGENT_SOURCE
    replaces the last), allowed by the configuration's `sources`: URL prefixes (for git) or
    directories (for local ones)."""

    def __init__(self, allowed: tuple[str, ...], workspace: Path) -> None:
        self.allowed = allowed
        self.workspace = workspace
        self.directories: list[Path] = []

    def fetch(self, url: str, branch: str = "") -> Path:
        """Blocking: clone or take the directory; handlers are looked for there first."""
        if url.startswith("-") or branch.startswith("-"):
            raise PeerError(f"agent source {url!r}: may not start with '-'")
        local = self._local_directory(url)
        directory = local if local is not None else self._clone(url, branch)
        self.directories = [directory]
        return directory

    def _local_directory(self, url: str) -> Path | None:
        parts = urlsplit(url)
        if parts.scheme not in ("", "file"):
            return None
        path = Path(parts.path if parts.scheme == "file" else url).resolve()
        if (path / ".git").exists():
            return None  # a repository: cloned at the branch asked for, like any other
        if not path.is_dir():
            raise PeerError(f"agent source {url!r}: no such directory")
        for allowed in self.allowed:
            root = Path(urlsplit(allowed).path if allowed.startswith("file:") else allowed)
            if root.is_absolute() and path.is_relative_to(root.resolve()):
                return path
        raise PeerError(f"agent source {url!r} is not under a directory the agent's configuration allows")

    def _clone(self, url: str, branch: str) -> Path:
        if not any(url.startswith(prefix) for prefix in self.allowed if prefix):
            allowed = ", ".join(self.allowed) or "none configured"
            raise PeerError(f"agent source {url!r} is not allowed (sources: {allowed})")
        if branch and not _REF.fullmatch(branch):
            raise PeerError(f"agent source {url!r}: {branch!r} is not a branch or tag name")
        digest = hashlib.sha256(f"{url}#{branch}".encode()).hexdigest()[:16]
        target = self.workspace / digest
        if target.exists():
            shutil.rmtree(target)  # fetched afresh: the branch may have moved
        self.workspace.mkdir(parents=True, exist_ok=True)
        argv = ["git", "clone", "--quiet", "--depth", "1", *(["--branch", branch] if branch else []), "--", url]
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        try:
            result = subprocess.run(
                [*argv, str(target)], capture_output=True, text=True, timeout=_CLONE_TIMEOUT_S, env=env, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PeerError(f"agent source {url!r}: git clone took over {_CLONE_TIMEOUT_S:g} s") from exc
        if result.returncode != 0:
            raise PeerError(f"agent source {url!r} at {branch or 'its default branch'}: {result.stderr.strip()}")
        return target


def find_handler(name: str, directories: list[Path]) -> Path:
    """The executable `name`, or the Python file `name.py`, in the first directory that has it."""
    if "/" in name or name.startswith(".") or not name:
        raise PeerError(f"handler {name!r}: a file name, not a path")
    for directory in directories:
        path = directory / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
        module = path if name.endswith(".py") else directory / f"{name}.py"
        if module.is_file():
            return module
    where = ", ".join(str(d) for d in directories) or "none configured"
    raise UnsupportedError(f"no action or handler {name!r} (handlers in {where})")


def handler_argv(path: Path, args: list[str], context: JsonObject) -> list[str]:
    if path.suffix == ".py" and not os.access(path, os.X_OK):
        return [sys.executable, "-c", _PYTHON_RUNNER, str(path), json.dumps(context, default=str)]
    return [str(path), *args]

"""Headless Chromium for the tests that look at a page as a person would."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["artifacts_dir", "chromium"]


def chromium(*args: str) -> str:
    if shutil.which("chromium") is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (.ci/run does)")
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


def artifacts_dir() -> Path:
    """Where a test keeps what a person may want to look at afterwards (screenshots)."""
    artifacts = Path(os.environ.get("MAESTRO_TEST_ARTIFACTS", "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    return artifacts

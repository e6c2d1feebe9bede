"""Headless Chromium for the tests that look at a page as a person would."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from coordinator.running.local import wait_for_port
from protocol.embedded_broker import free_port

__all__ = ["Browser", "artifacts_dir", "chromium", "drawn_page"]


def chromium(*args: str) -> str:
    if shutil.which("chromium") is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (.ci/run does)")
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


def drawn_page(url: str, screenshot: str, height: int = 3000) -> str:
    """The page's DOM once its scripts ran, and a screenshot kept as `screenshot` in the
    artifacts folder (see the size of it for a page that drew nothing)."""
    page = chromium("--virtual-time-budget=10000", "--dump-dom", url)
    shot = artifacts_dir() / screenshot
    chromium(f"--window-size=1280,{height}", "--virtual-time-budget=10000", f"--screenshot={shot.resolve()}", url)
    return page


def artifacts_dir() -> Path:
    """Where a test keeps what a person may want to look at afterwards (screenshots)."""
    artifacts = Path(os.environ.get("MAESTRO_TEST_ARTIFACTS", "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    return artifacts


class Browser:
    """Headless Chromium driven over the W3C WebDriver protocol by chromedriver (no client
    library: a handful of JSON requests), for a page that changes while it is open."""

    def __init__(self, log_dir: Path) -> None:
        if shutil.which("chromedriver") is None:
            pytest.fail("chromedriver is not installed: `apt-get install -y chromium-driver` (.ci/run does)")
        self.port = free_port()
        with (log_dir / "chromedriver.log").open("ab") as log:
            self.proc = subprocess.Popen(["chromedriver", f"--port={self.port}"], stdout=log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        wait_for_port(self.port)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1800"]
        capabilities = {"browserName": "chrome", "goog:chromeOptions": {"args": args, "binary": "/usr/bin/chromium"}}
        session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
        self.session = f"/session/{session['sessionId']}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"WebDriver {method} {path}: {exc.read().decode(errors='replace')[:500]}") from exc

    def open(self, url: str) -> None:
        self._call("POST", f"{self.session}/url", {"url": url})

    def url(self) -> str:
        return str(self._call("GET", f"{self.session}/url"))

    def run(self, script: str) -> Any:
        """The value of a JavaScript function body run in the page (`return ...`)."""
        return self._call("POST", f"{self.session}/execute/sync", {"script": script, "args": []})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._call("GET", f"{self.session}/screenshot")))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call("DELETE", self.session)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

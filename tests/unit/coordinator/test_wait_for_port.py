"""Waiting for a process to listen: the wait ends at once when that process has exited, and says so."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from coordinator.running.local import LocalError, wait_for_port
from protocol.embedded_broker import free_port


def test_a_process_that_exits_ends_the_wait_at_once_with_its_exit_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        started = time.monotonic()
        with pytest.raises(LocalError, match=r"exited with code 3"):
            wait_for_port(free_port(), timeout_s=30, proc=proc)
        assert time.monotonic() - started < 10  # not the 30 s of the timeout
    finally:
        proc.wait()


def test_a_port_listened_on_ends_the_wait_whatever_the_process() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        wait_for_port(listener.getsockname()[1], timeout_s=5)


def test_nothing_listening_waits_out_the_timeout() -> None:
    with pytest.raises(LocalError, match=r"nothing listens on 127\.0\.0\.1:\d+ after 0\.3 s"):
        wait_for_port(free_port(), timeout_s=0.3)

"""The agent's fault proxy in a process of its own, driven over its stdin (a JSON line of faults).

In the test's own process the proxy's delays wait for the GIL behind the coordinator,
up to the 5 ms switch interval, and a loaded machine showed that as a 1 ms rise in a 20 ms
delay: the fixture's error, not the tool's. Alone, it holds the delay to about 0.1 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import TracebackType

from coordinator.running.local import wait_for_port
from protocol.embedded_broker import free_port

_SERVE = """
import asyncio, json, sys
from agent.proxy import FaultProxy, Faults

async def main(listen_host: str, listen_port: int, upstream_port: int) -> None:
    proxy = FaultProxy("sut-path", (listen_host, listen_port), ("127.0.0.1", upstream_port))
    await proxy.start()
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            proxy.set(Faults(**json.loads(line)))
            print("set", flush=True)
    finally:
        await proxy.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


class ProxyProcess:
    """A fault proxy from `listen_host`:`listen_port` (a free one if 0) to the upstream port on
    127.0.0.1; ends when its stdin closes, or is killed at exit."""

    def __init__(self, upstream_port: int, listen_port: int = 0, listen_host: str = "127.0.0.1") -> None:
        self.port = listen_port or free_port()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, listen_host, str(self.port), str(upstream_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_port(self.port, listen_host, proc=self._proc)
        except BaseException:
            self.close()
            raise

    def set_latency(self, ms: float) -> None:
        self.set_faults(latency_ms=ms)

    def set_faults(self, **faults: float | bool) -> None:
        """These faults in force (agent.proxy.Faults' fields), replacing the previous ones: none heals."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(faults) + "\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline().strip() == "set", f"the proxy process did not take {faults}"

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

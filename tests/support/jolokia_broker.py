"""A real Jolokia endpoint for the jolokia inspector's test: tests/support/jolokia/JolokiaBroker.java
run by the JDK's source launcher on Debian's ActiveMQ 5 and Jolokia 1.7 jars (.ci/run installs
them: libactivemq-java, libjolokia-core-java and what they need)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from protocol.embedded_broker import free_port

LAUNCHER = Path(__file__).parent / "jolokia" / "JolokiaBroker.java"
USER, PASSWORD = "admin", "s3cret-jolokia"  # a test's own, on loopback
JARS = [
    "activemq-broker",
    "activemq-client",
    "geronimo-jms_1.1_spec",
    "geronimo-j2ee-management-1.1-spec",
    "hawtbuf",
    "jolokia-core",
    "json-simple",
    "slf4j-api",
    "slf4j-nop",
]


@contextmanager
def jolokia_broker(queue: str, messages: int) -> Iterator[str]:
    """The Jolokia URL of a JVM running an ActiveMQ broker with `messages` on `queue`, which
    asks for basic authentication as `USER` with `PASSWORD` (the URL does not carry them)."""
    missing = [jar for jar in JARS if not Path(f"/usr/share/java/{jar}.jar").exists()]
    if missing:
        raise RuntimeError(f"Debian's jars are missing: {', '.join(missing)} (.ci/run installs them)")
    classpath = ":".join(f"/usr/share/java/{jar}.jar" for jar in JARS)
    port = free_port()
    proc = subprocess.Popen(
        ["java", "-cp", classpath, str(LAUNCHER), str(port), queue, str(messages), USER, PASSWORD],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the JVM compiles the launcher, starts the broker: a few seconds
            lines.append(line)
            if line.startswith("READY"):
                break
        else:
            raise RuntimeError("the Jolokia broker did not start:\n" + "".join(lines[-30:]))
        yield f"http://127.0.0.1:{port}/jolokia"
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()

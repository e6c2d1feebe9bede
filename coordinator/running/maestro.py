"""`Maestro`: what a test script holds. The control-bus client, plus running tests and the
data server they upload to.

    with Maestro.connect("mqtt://lab-broker:1883") as maestro:
        maestro.assign_roles(senders=1, receivers=1)
        print(maestro.run(FixedRateTest(send_url="amqp://lab-sut/q", rate=1000)))
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coordinator.bus.client import DEFAULT_TIMEOUT_S, MaestroClient
from coordinator.definitions import TestDefinition
from coordinator.outcome.results import TestResult
from coordinator.outcome.storage import DATA_SERVER_ENV, DataServer
from coordinator.running.local import LocalCluster
from coordinator.running.runner import run_test
from protocol.broker_url import BrokerUrl, default_broker_url
from protocol.bus import ControlBus, Identity
from protocol.codes import Role
from protocol.secrets import KEY_FILE_ENV, TOKEN_FILE_ENV, env_path, read_token_file
from protocol.signing import NoteKey
from protocol.topics import DEFAULT_PREFIX, Topics

__all__ = ["Maestro"]

log = logging.getLogger(__name__)


def open_bus(
    url: str | None,
    topic_prefix: str = DEFAULT_PREFIX,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    key: NoteKey | None = None,
) -> ControlBus:
    """The coordinator's connection to the control broker, subscribed to what peers send it.
    With a key it signs every note and takes only signed ones: an unsigned notification could be
    anyone's (#38: a forged NOTIFY_FAIL failed a signed test)."""
    identity = Identity.new("maestro", socket.gethostname(), Role.COORDINATOR.value)
    topics = Topics(topic_prefix)
    # Its last will tells the peers running its test that it is gone (protocol/presence.py).
    bus = ControlBus(
        BrokerUrl.parse(url or default_broker_url()),
        identity,
        topics,
        will_topic=topics.coordinator,
        key=key,
        require_signed=key is not None,
    )
    # Answers at QoS 0: Mosquitto holds at most 20 QoS 1 messages in flight and queues 1,000 per
    # client, and drops the rest, so a thousand peers answering at once would lose answers; at
    # QoS 0 they all flow, and a peer whose answer is lost anyway is asked again (asking.py).
    bus.subscribe([topics.maestro], qos=0)
    bus.subscribe([topics.notifications])
    # Its own presence topic too: a copy of its last will published there while it is connected
    # is answered at once with PEER_ONLINE (peer_bus.py), before the peers' grace runs out.
    bus.subscribe([topics.coordinator])
    bus.connect(timeout_s)
    return bus


class Maestro(MaestroClient):
    def __init__(self, bus: ControlBus, data_server: str | None = None, upload_token: str | None = None) -> None:
        super().__init__(bus)
        # Where peers upload results: given, else $MAESTRO_DATA_SERVER, else one started here.
        self.data_server = data_server or os.environ.get(DATA_SERVER_ENV) or None
        self.upload_token = upload_token  # the data server's bearer token, when it wants one
        self._local: LocalCluster | None = None  # a data server started on demand
        self._cluster: LocalCluster | None = None  # what `Maestro.local` started
        self.local_root: Path | None = None  # the data server's folder, when it runs on this machine
        self.local_data_root = Path("results")  # where to start one when none is given

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        *,
        topic_prefix: str = DEFAULT_PREFIX,
        discover_s: float = 1.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        data_server: str | None = None,
        key_file: Path | None = None,
        token_file: Path | None = None,
    ) -> Maestro:
        """Connect to the control broker and discover the peers (PING, `discover_s` window).

        `key_file` (default $MAESTRO_KEY_FILE): sign every note with its key, as keyed peers
        require; `token_file` (default $MAESTRO_TOKEN_FILE): the data server's bearer token.
        Raises SecretFileError for a file that cannot be used."""
        key_file = key_file or env_path(KEY_FILE_ENV)
        token_file = token_file or env_path(TOKEN_FILE_ENV)
        key = NoteKey.from_file(key_file) if key_file else None
        token = read_token_file(token_file) if token_file else None
        maestro = cls(open_bus(url, topic_prefix, timeout_s, key), data_server, token)
        if discover_s > 0:
            maestro.discover(discover_s)
        return maestro

    @classmethod
    @contextmanager
    def local(
        cls,
        workers: int = 2,
        *,
        inspectors: int = 0,
        agents: tuple[str, ...] = (),
        data: Path = Path("results"),
        broker: str | None = None,
        topic_prefix: str = DEFAULT_PREFIX,
        data_server: str | None = None,
        name: str | None = None,
    ) -> Iterator[Maestro]:
        """Everything on this machine: an embedded control broker (unless `broker`), the data
        server over `data` (unless `data_server`), `workers` role-less worker daemons, `inspectors`
        inspector daemons and an agent daemon per name in `agents`; all stopped on leaving. The
        daemons are named `worker-1-NAME`... (NAME default: a tag of this run's); `local_cluster` is
        what started them, and can start more (a SUT: `tansu()`).

            with Maestro.local(workers=2) as maestro:
                print(maestro.run(FixedRateTest(send_url="amqp://127.0.0.1/q", rate=100)))
        """
        root = data.resolve()
        run_dir = root / ".local" / time.strftime("%Y%m%d-%H%M%S")
        with LocalCluster(run_dir, topic_prefix=topic_prefix, broker_url=broker or "") as cluster:
            server = data_server or cluster.data_server(root)
            tag = name or uuid.uuid4().hex[:4]
            names = [("maestro-worker", f"worker-{n}-{tag}") for n in range(1, workers + 1)]
            names += [("maestro-inspector", f"inspector-{n}-{tag}") for n in range(1, inspectors + 1)]
            names += [("maestro-agent", agent) for agent in agents]
            for command, daemon in names:
                cluster.daemon(command, daemon, run_dir / "peers" / daemon)
            with cls.connect(
                cluster.broker_url,
                topic_prefix=topic_prefix,
                discover_s=0,
                data_server=server,
                key_file=cluster.key_file(),
            ) as m:
                m.local_root = None if data_server else root
                m._cluster = cluster
                m.wait_for_peers(len(names), timeout_s=30)
                yield m

    @property
    def local_cluster(self) -> LocalCluster:
        """What `Maestro.local` started; only there."""
        if self._cluster is None:
            raise RuntimeError("local_cluster: this Maestro was not made by Maestro.local")
        return self._cluster

    def close(self) -> None:
        super().close()
        if self._local is not None:
            self._local.close()
            self._local = None

    def dead_local_processes(self) -> dict[str, int]:
        """Processes started on this machine for the tests (daemons, the data server) that
        exited while they should run, with their exit codes."""
        return {name: code for c in (self._cluster, self._local) if c is not None for name, code in c.dead().items()}

    # --- tests --------------------------------------------------------------------------------

    def run(
        self, test: TestDefinition, *, test_id: str | None = None, progress: bool = True, log_interval_s: float = 1.0
    ) -> TestResult:
        """Run a test to its end and return its outcome and figures; the files are on the data
        server under the test id whatever happened. `progress`: a line on standard error, in place
        on a terminal, else one every `log_interval_s`."""
        store = DataServer(self.data_server_url(), self.upload_token)
        return run_test(self, test, store, test_id, progress, log_interval_s=log_interval_s)

    def data_server_url(self) -> str:
        """Where peers upload: the one given, else one started on this machine over
        `local_data_root`."""
        if self.data_server is None:
            root = self.local_data_root.resolve()
            self._local = LocalCluster(root / ".logs", broker_url=str(self.bus.url))
            self.data_server = self._local.data_server(root)
            self.local_root = root
            log.warning(
                "no data server given (data_server= or $MAESTRO_DATA_SERVER): started one at %s over %s; "
                "peers on other hosts cannot reach it",
                self.data_server,
                root,
            )
        return self.data_server

"""Daemons started once and kept, as a lab runs them: each test on its own settings.

Four tests back to back on the same sender, receiver and agent (request/reply, fixed-rate,
incremental, fixed-rate with a fault), then each again on daemons started for it alone. Known
answer: the same kind, the same counts and the same options in every peer.json. Before #34 the
second test ran as request/reply, with the first test's think time in its peer.json.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.processes import Daemons, wait_for_port
from support.runs import run_with

from coordinator import Action, FixedRateTest, IncrementalTest, RequestReplyTest, TestResult
from coordinator.definitions import TestDefinition
from protocol.embedded_broker import free_port

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]

BROKER = "amqp://guest:guest@127.0.0.1:5672"
# Set per test by the coordinator: they name the test, not its settings.
_PER_TEST = {"test_id", "data_server_url"}


@dataclass(frozen=True)
class Outcome:
    """What a test gave, as compared between long-lived and fresh daemons."""

    kind: str
    load_model: str
    counts: tuple[int, ...]
    options: dict[str, dict[str, Any]]  # each peer's peer.json options, by phase and peer


def _tests(proxy_port: int) -> list[TestDefinition]:
    queue = f"maestro-kept-{uuid.uuid4().hex[:8]}"
    fixed = FixedRateTest(send_url=f"{BROKER}/{queue}-fixed", rate=40, parallel=2, duration="3s")
    return [
        RequestReplyTest(
            request_url=f"{BROKER}/{queue}-requests",
            reply_url=f"{BROKER}/amq.rabbitmq.reply-to",
            clients=2,
            think_time="20ms",
            service_time="2ms",
            duration="3s",
        ),
        fixed,
        IncrementalTest(
            base=FixedRateTest(send_url=f"{BROKER}/{queue}-steps", duration="2s"),
            initial_rate=20,
            ceiling_rate=40,
            rate_step=20,
        ),
        FixedRateTest(
            # Through the agent's fault proxy, which holds every byte 30 ms for a second.
            send_url=f"amqp://guest:guest@127.0.0.1:{proxy_port}/{queue}-fault",
            receive_url=f"{BROKER}/{queue}-fault",
            rate=30,
            duration="4s",
            agents=("a1",),
            actions=(Action("1s", "a1", "latency", ("sut-proxy", "ms=30", "duration_s=1")),),
        ),
    ]


def _start(daemons: Daemons, tmp_path: Path, proxy_port: int) -> None:
    config = tmp_path / f"agent-{uuid.uuid4().hex[:6]}.toml"
    config.write_text(f'[proxies.sut-proxy]\nlisten = "127.0.0.1:{proxy_port}"\nupstream = "127.0.0.1:5672"\n')
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-agent", "a1", "--config", str(config))
    wait_for_port(proxy_port)


def _outcome(result: TestResult, root: Path) -> Outcome:
    phases = [result, *result.steps] if result.steps else [result]
    options: dict[str, dict[str, Any]] = {}
    for n, phase in enumerate(phases):
        for peer_json in sorted((root / phase.test_id).glob("*/*/peer.json")):
            record = json.loads(peer_json.read_text())
            kept = {k: v for k, v in record["options"].items() if k not in _PER_TEST}
            options[f"phase {n} {peer_json.parent.parent.name}/{peer_json.parent.name}"] = kept
    s = result.summary.to_json()
    return Outcome(
        kind=result.record.kind,
        load_model=s.get("load_model", ""),
        # A closed system's counts depend on how fast replies come: only what must not vary.
        counts=(s["lost"], s["duplicates"])
        if s.get("load_model") == "closed"
        else (s["sent"], s["received"], s["lost"], s["duplicates"]),
        options=options,
    )


@pytest.mark.timeout(420)
def test_each_test_on_long_lived_daemons_runs_as_on_fresh_ones(
    tmp_path: Path, prefix: str, mosquitto_url: str, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    proxy_port = free_port()
    tests = _tests(proxy_port)
    kept = Daemons(mosquitto_url, prefix, tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    try:
        _start(kept, tmp_path, proxy_port)
        on_kept = [run_with(kept, url, test, peers=3) for test in tests]
    finally:
        kept.kill_all()
    on_fresh = []
    for n, test in enumerate(tests):
        fresh = Daemons(mosquitto_url, f"{prefix}-{n}", tmp_path / f"fresh-{n}")
        (tmp_path / f"fresh-{n}").mkdir()
        try:
            _start(fresh, tmp_path, proxy_port)
            on_fresh.append(run_with(fresh, url, test, peers=3))
        finally:
            fresh.kill_all()
    for kept_result, fresh_result in zip(on_kept, on_fresh, strict=True):
        assert fresh_result.passed, fresh_result.reason
        assert kept_result.passed, kept_result.reason
        assert _outcome(kept_result, root) == _outcome(fresh_result, root)
    # And each is the test asked for: the fixed-rate tests open, 2 clients x 40 msg/s x 3 s.
    kinds = [(o.kind, o.load_model) for o in (_outcome(r, root) for r in on_kept)]
    assert kinds == [
        ("request-reply", "closed"),
        ("fixed-rate", "open"),
        ("incremental", "open"),
        ("fixed-rate", "open"),
    ]
    fixed = _outcome(on_kept[1], root)
    assert fixed.counts == (240, 240, 0, 0)
    # peer.json holds this test's options, nothing of the request/reply test before it.
    assert fixed.options["phase 0 sender/s1"]["rate_per_s"] == 40
    assert not any({"request_reply", "think_time", "service_time"} & set(o) for o in fixed.options.values())

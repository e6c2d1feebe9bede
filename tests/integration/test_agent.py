"""The fault-injection agent on this machine: its own SUT (a private Mosquitto it starts and
restarts), handlers from a configured directory, and what it refuses."""

from __future__ import annotations

import socket
import stat
import time
from pathlib import Path

import pytest
from support.processes import Daemons, private_mosquitto, wait_for_port
from support.runs import run_with

from coordinator import Action, Fail, FixedRateTest, Maestro, PeerRequestError
from protocol.notes import CommandFinished, UserCommand

pytestmark = pytest.mark.mosquitto


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def agent_config(tmp_path: Path) -> tuple[Path, int]:
    """An agent that owns a private Mosquitto (`sut`) and may run the handlers in handlers/."""
    sut_dir = tmp_path / "sut"
    sut_dir.mkdir()
    sut = private_mosquitto(sut_dir)
    handlers = tmp_path / "handlers"
    handlers.mkdir()
    for name, body in (("echo-args", 'echo "args: $*"; exit 3'), ("sleeper", "sleep 30")):
        path = handlers / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[handlers]\ndirectories = ["{handlers}"]\ntimeout_s = 2\n\n'
        f'[services.sut]\nstart = ["mosquitto", "-c", "{sut.config}"]\nautostart = true\n'
    )
    return config, sut.port


def test_a_scheduled_restart_of_the_sut_during_a_test(
    daemons: Daemons, maestro: Maestro, tmp_path: Path, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    config, port = agent_config(tmp_path)
    daemons.start("maestro-agent", "a1", "--config", str(config))
    wait_for_port(port)  # the agent started its SUT
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(
        send_url=f"mqtt://127.0.0.1:{port}/maestro/restart?qos=1",
        rate=50,
        duration="8s",
        fail=Fail(max_loss_ratio=1.0),  # seed 004 §6.2 counts the loss; it does not fail on it
        actions=(Action("3s", "a1", "restart", ("sut",)),),
    )
    result = run_with(daemons, url, test, peers=3)
    assert result.passed, result.reason
    s = result.summary
    # Every scheduled message went (the sender retries across the outage); what did not arrive
    # is counted by sequence numbers, as in seed 004 Table 6.6.
    assert s["sent"] == 400 and s["received"] + s["lost"] == 400
    restart = [e for e in result.record["events"] if e.get("action") == "restart"]
    assert [e["phase"] for e in restart] == ["start", "end"]
    assert restart[0]["target"] == "sut" and restart[0]["agent"].startswith("a1@")
    assert (root / result.test_id / "agent" / "a1" / "agent-events.csv").read_text().count("restart") == 2
    assert port_open(port)  # restarted, and left running
    maestro.wait_for_peers(1, timeout_s=10)
    maestro.halt(to=maestro.find("a1"))
    deadline = time.monotonic() + 15
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not port_open(port)  # a clean stop stops what the agent started


def test_handlers_run_time_out_and_anything_else_is_refused(daemons: Daemons, maestro: Maestro, tmp_path: Path) -> None:
    config, port = agent_config(tmp_path)
    daemons.start("maestro-agent", "a1", "--config", str(config))
    (agent,) = maestro.wait_for_peers(1, timeout_s=20)
    maestro.request(UserCommand(command="echo-args", args=["one", "two words"]), to=agent)
    (done,) = maestro.wait_for((CommandFinished,), [agent], timeout_s=10).values()
    assert isinstance(done, CommandFinished)
    assert (done.exit_code, done.output_tail.strip()) == (3, "args: one two words")
    maestro.request(UserCommand(command="sleeper"), to=agent)
    (slow,) = maestro.wait_for((CommandFinished,), [agent], timeout_s=10).values()
    assert isinstance(slow, CommandFinished) and slow.exit_code == -9 and "killed after 2 s" in slow.output_tail
    for command, args, why in (
        ("rm", ["-rf", "/"], "no action or handler 'rm'"),
        ("../bin/sh", [], "a file name, not a path"),
        ("restart", ["database"], "no service 'database'"),
        ("stop", ["sut", "now"], "unknown argument 'now'"),
    ):
        with pytest.raises(PeerRequestError, match=why):
            maestro.request(UserCommand(command=command, args=args), to=agent)
    # A stop for 2 s: down, then up again by itself.
    maestro.request(UserCommand(command="stop", args=["sut", "duration_s=2"]), to=agent)
    deadline = time.monotonic() + 5
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not port_open(port)
    wait_for_port(port, timeout_s=10)
    maestro.halt(to=agent)


def test_several_agents_and_inspectors_join_one_test(
    daemons: Daemons, tmp_path: Path, data_server: tuple[str, Path]
) -> None:
    """Seed 004 §7.6: more than one agent and inspector in one test, each addressed by name."""
    url, root = data_server
    for name in ("a1", "a2"):
        daemons.start("maestro-agent", name)
    for name in ("i1", "i2"):
        daemons.start("maestro-inspector", name)
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(
        send_url="mqtt://127.0.0.1:1883/maestro/agents?qos=1",
        rate=10,
        duration="2s",
        agents=("a1", "a2"),
        inspectors=("host", "host"),
        options={"inspector_interval_s": 1},
    )
    result = run_with(daemons, url, test, peers=6)
    assert result.passed, result.reason
    folder = root / result.test_id
    assert sorted(p.name for p in (folder / "agent").iterdir()) == ["a1", "a2"]
    assert sorted(p.name for p in (folder / "inspector").iterdir()) == ["i1", "i2"]

"""The fault-injection agent on this machine: its own SUT (a private Mosquitto it starts and
restarts), handlers from a configured directory, and what it refuses."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.outage import outage
from support.processes import Daemons, private_mosquitto, wait_for_port
from support.runs import run_with

from agent.config import ServiceConfig
from agent.services import Service
from agent.targets import ServiceTarget
from coordinator import Action, Fail, FixedRateTest, Maestro, PeerRequestError
from protocol.embedded_broker import free_port
from protocol.notes import AgentSource, CommandFinished, UserCommand
from protocol.process_table import process_state
from protocol.runtime import PeerError
from reports.report import build_report
from reports.time_series import spark_session

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
    s = result.summary.to_json()
    # Every scheduled message went (the sender retries across the outage); what did not arrive
    # is counted by sequence numbers, as in seed 004 Table 6.6.
    assert s["sent"] == 400 and s["received"] + s["lost"] == 400
    test_dir = root / result.test_id
    sender = json.loads((test_dir / "sender" / "s1" / "peer.json").read_text())
    assert sender["errors"].get("disconnected", 0) >= 1 and sender["retries"] == sender["errors"]["disconnected"]
    # The loss is what was due while nothing could arrive (50/s over the gap), no more; and what
    # was meant to go once the broker was back arrived, all but a few.
    gone = outage([test_dir / "sender" / "s1"], [test_dir / "receiver" / "r1"])
    assert 0.2 <= gone.gap_s < 5.0, gone
    assert s["lost"] <= 50 * gone.gap_s + 1, (s["lost"], gone)
    assert gone.due_after >= 50 and gone.arrived_after >= 0.9 * gone.due_after, gone
    restart = [e for e in result.record.events or () if e.get("action") == "restart"]
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
        ("restart", ["database"], "no 'database' in the agent's configuration"),
        ("stop", ["sut", "now"], "expected key=value, got 'now'"),
        ("stop", ["sut", "signal=9"], "unknown argument 'signal'"),
        ("latency", ["sut", "ms=20"], "sut is a service, which takes stop, start"),
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


def _agent_with_a_proxy_and_a_pair(daemons: Daemons, tmp_path: Path) -> tuple[int, int]:
    """An agent owning a private Mosquitto (`sut`) with a fault proxy in front of it
    (`sut-proxy`), a receiver and a sender: the broker's port and the proxy's."""
    config, port = agent_config(tmp_path)
    proxy_port = free_port()
    proxy = f'[proxies.sut-proxy]\nlisten = "127.0.0.1:{proxy_port}"\nupstream = "127.0.0.1:{port}"\n'
    config.write_text(config.read_text() + "\n" + proxy)
    daemons.start("maestro-agent", "a1", "--config", str(config))
    wait_for_port(port)
    wait_for_port(proxy_port)
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    return port, proxy_port


def _report_with_faults(test_dir: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The test's report folder, and its fault table by fault ("latency sut-proxy")."""
    spark = spark_session()
    try:
        out, _ = build_report(spark, test_dir)
    finally:
        spark.stop()
    return out, {row["fault"].split(" (")[0]: row for row in json.loads((out / "faults.json").read_text())}


@pytest.mark.quiet  # judges a p99 difference to 15-30 ms: another test beside it took 31.5 in one CI run
@pytest.mark.timeout(180)
def test_a_scheduled_restart_and_an_added_delay_show_in_the_report_with_their_effect(
    daemons: Daemons, maestro: Maestro, tmp_path: Path, data_server: tuple[str, Path]
) -> None:
    """#8's done-when: an agent started with a config file, a restart and 20 ms of added delay
    in one real test, both in the report with their effect, and nothing left changed."""
    url, root = data_server
    port, proxy_port = _agent_with_a_proxy_and_a_pair(daemons, tmp_path)
    test = FixedRateTest(
        send_url=f"mqtt://127.0.0.1:{proxy_port}/maestro/effects?qos=1",  # through the proxy
        receive_url=f"mqtt://127.0.0.1:{port}/maestro/effects?qos=1",  # straight from the broker
        rate=50,
        duration="18s",
        # Ten unconfirmed at a time: one client waiting for each PUBACK would manage only
        # 1 / (40 ms round trip) = 25 msg/s through the delay, and fall behind its schedule.
        options={"confirm_window": 10},
        fail=Fail(max_loss_ratio=1.0),
        actions=(
            Action("2s", "a1", "latency", ("sut-proxy", "ms=20", "duration_s=3")),
            Action("12s", "a1", "restart", ("sut",)),
        ),
    )
    result = run_with(daemons, url, test, peers=3)
    assert result.passed, result.reason

    out, faults = _report_with_faults(root / result.test_id)
    assert set(faults) == {"latency sut-proxy", "restart sut"}
    delay, restart = faults["latency sut-proxy"], faults["restart sut"]
    assert 2.5 <= delay["end_s"] - delay["start_s"] <= 4.0
    # 20 ms more on the way from the sender to the broker, and gone after. Against the quieter of
    # the windows around it: on a busy machine the first 2 s of a test (the window before) can
    # have a p99 of several ms on their own (7.4 ms in one CI run).
    assert delay["p99_during_ms"] >= 20, delay
    # Not twice the delay: at most 10 ms past 20 over the noisier window around it, whose own p99
    # is the noise of the moment (a full run beside another job: before 3.9, during 39.3, after
    # 17.6 ms). A 40 ms delay on a quiet machine (windows of 1-4 ms) fails it.
    quiet, noisy = sorted((delay["p99_before_ms"], delay["p99_after_ms"]))
    assert delay["p99_during_ms"] - quiet >= 15 and delay["p99_during_ms"] <= noisy + 30, delay
    assert delay["p99_after_ms"] < delay["p99_before_ms"] + 10
    assert delay["outage_s"] == 0.0 and delay["lost"] == 0
    _check_the_restart(restart, result.summary.to_json(), root / result.test_id)
    page = (out / "index.html").read_text()
    assert "Faults and their effect" in page and "latency sut-proxy" in page and "restart sut" in page
    # Nothing stays changed: the proxy passes traffic without delay, and the broker runs.
    assert port_open(port) and port_open(proxy_port)
    events = [e for e in result.record.events or () if e.get("target") == "sut-proxy"]
    assert [e["phase"] for e in events] == ["start", "end"] and events[1].get("restored") == "clear latency"


def _check_the_restart(restart: dict[str, Any], summary: dict[str, Any], test_dir: Path) -> None:
    """A restart of the SUT under 50 msg/s: arrivals stop and come back at the rate, what was
    lost is no more than what was due while nothing arrived, and the sender rode it out."""
    # Every message of the schedule (50/s for 18 s) went: the sender retried the send that met
    # the closed connection, once for each time it met it, and saw the outage once.
    assert summary["sent"] == 900
    sender = json.loads((test_dir / "sender" / "s1" / "peer.json").read_text())
    assert sender["errors"].get("disconnected", 0) >= 1 and sender["retries"] == sender["errors"]["disconnected"]
    assert restart["disconnects"] == 1  # one client, one outage
    assert restart["reconnects"] == 2  # the sender's client and the receiver's, once each
    # The outage the report found is the longest gap in the receiver's own rows: the restart's
    # few ms and the clients' reconnect waits (0.5 s, doubling to 2 s); 0.82 s in one run.
    gone = outage([test_dir / "sender" / "s1"], [test_dir / "receiver" / "r1"])
    assert 0.1 < restart["outage_s"] < 5.0 and abs(restart["outage_s"] - gone.gap_s) < 0.002, (restart, gone)
    assert restart["lost"] == summary["lost"]
    # Lost: at most what was due while nothing arrived, and the ten the confirm window let be in
    # flight when the broker went.
    assert restart["lost"] <= 50 * restart["outage_s"] + 10, restart
    # Back: from the outage's end (after the restart's, while the clients reconnect), a second's
    # arrivals reach 95 % of the rate before within a step of the report's 100 ms search, and
    # nine in ten of the messages meant to go after the gap arrived.
    resumed_s = restart["outage_from_s"] + restart["outage_s"] - restart["end_s"]
    assert restart["rate_before_per_s"] >= 0.9 * 50, restart
    assert restart["back_to_95_percent_s"] is not None, restart
    assert restart["back_to_95_percent_s"] <= max(0.0, resumed_s) + 0.2, (restart, resumed_s)
    # The figure the nightly gate judges, in test.json's summary (the slowest fault's; the delay
    # before did not dent the arrivals): the same, in whole seconds rather than 100 ms steps.
    recovery = summary.get("recovery_s")
    assert recovery is not None and abs(recovery - restart["back_to_95_percent_s"]) <= 1.0, (recovery, restart)
    assert restart["first_consume_after_s"] is not None, restart
    assert gone.due_after >= 50 and gone.arrived_after >= 0.9 * gone.due_after, gone


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _handler_repository(where: Path) -> Path:
    """A git repository of handlers: `hello` on main, and on the branch `feature` another
    `hello` and a Python `report.py` with handle(context)."""
    repo = where / "handlers-repo"
    repo.mkdir()
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    hello = repo / "hello"
    hello.write_text('#!/bin/sh\necho "main $*"\n')
    hello.chmod(0o755)
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "main")
    _git(repo, "checkout", "--quiet", "-b", "feature")
    hello.write_text('#!/bin/sh\necho "feature $*"\n')
    (repo / "report.py").write_text(
        "def handle(context):\n"
        "    print('args', context['args'], 'agent', context['agent'], 'timeout', context['options'].get('x'))\n"
        "    return 4\n"
    )
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "feature")
    _git(repo, "checkout", "--quiet", "main")
    return repo


def test_handlers_from_a_git_source_and_python_handle_functions(
    daemons: Daemons, maestro: Maestro, tmp_path: Path
) -> None:
    repo = _handler_repository(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[handlers]\nsources = ["file://{tmp_path}/"]\ntimeout_s = 5\n')
    daemons.start("maestro-agent", "a1", "--config", str(config))
    (agent,) = maestro.wait_for_peers(1, timeout_s=20)

    def run(command: str, *args: str) -> CommandFinished:
        maestro.request(UserCommand(command=command, args=list(args)), to=agent)
        (done,) = maestro.wait_for((CommandFinished,), [agent], timeout_s=10).values()
        assert isinstance(done, CommandFinished)
        return done

    maestro.agent_source(f"file://{repo}", "feature", to=agent)
    hello = run("hello", "x")
    assert (hello.exit_code, hello.output_tail.strip()) == (0, "feature x")
    report = run("report", "a", "b c")
    assert report.exit_code == 4
    assert report.output_tail.strip() == "args ['a', 'b c'] agent a1 timeout None"
    maestro.request(AgentSource(url=f"file://{repo}"), to=agent, timeout_s=30)  # its default branch
    assert run("hello").output_tail.strip() == "main"
    with pytest.raises(PeerRequestError, match="no action or handler 'report'"):
        maestro.request(UserCommand(command="report"), to=agent)  # main has no report.py

    for url, branch, why in (
        ("https://example.com/evil.git", "", "is not allowed"),
        (f"file://{repo}", "--upload-pack=touch /tmp/x", "may not start with '-'"),
        (f"file://{repo}", "no-such-branch", "no-such-branch"),
        ("/etc", "", "not under a directory the agent's configuration allows"),
    ):
        with pytest.raises(PeerRequestError, match=why):
            maestro.request(AgentSource(url=url, branch=branch), to=agent, timeout_s=30)


@pytest.mark.timeout(180)
def test_a_blackhole_and_a_shutdown_for_seconds_show_as_outages_with_their_recovery(
    daemons: Daemons, maestro: Maestro, tmp_path: Path, data_server: tuple[str, Path]
) -> None:
    """Seed 004 §6.2's other run: the broker shut down for a few seconds; and a blackhole on the
    senders' path. Each shows as a pause in arrivals about as long as the fault, then recovery."""
    url, root = data_server
    port, proxy_port = _agent_with_a_proxy_and_a_pair(daemons, tmp_path)
    test = FixedRateTest(
        send_url=f"mqtt://127.0.0.1:{proxy_port}/maestro/outages?qos=1",
        receive_url=f"mqtt://127.0.0.1:{port}/maestro/outages?qos=1",
        rate=50,
        # Long enough after the stop for "back to 95 %" to be seen: the outage may last up to 12 s
        # (below), and in one CI run the clients were back 4 s after the broker, 1 s before a 16 s end.
        duration="32s",
        options={"confirm_window": 10},
        fail=Fail(max_loss_ratio=1.0),
        actions=(
            Action("2s", "a1", "blackhole", ("sut-proxy", "duration_s=2")),
            # More than 10 s after the blackhole's end: the rate before the stop is taken over the
            # 10 s before it, and the blackhole's held messages, arriving at once when it ends,
            # made it 70/s, a rate the test's 50/s never reaches again unless the sender's catch-up
            # after the stop arrives too, which it does not when the sender reconnects before the
            # receiver has subscribed again.
            Action("16s", "a1", "stop", ("sut", "duration_s=3")),
        ),
    )
    result = run_with(daemons, url, test, peers=3)
    assert result.passed, result.reason
    _, rows = _report_with_faults(root / result.test_id)
    blackhole, stop = rows["blackhole sut-proxy"], rows["stop sut"]
    assert 1.7 <= blackhole["outage_s"] <= 3.0, blackhole
    assert blackhole["lost"] == 0  # held, not dropped: TCP delivers it late
    assert blackhole["p99_after_ms"] >= 1500  # ... and late shows in the latency of what came after
    # The broker is back after 3 s; the sender's MQTT client may take longer, backing off between
    # reconnects (paho: 1 s, doubling): the outage is what the clients saw.
    assert 2.7 <= stop["outage_s"] <= 12.0, stop
    assert stop["first_consume_after_s"] is not None and stop["back_to_95_percent_s"] is not None
    assert stop["disconnects"] >= 1
    assert stop["reconnects"] >= 2  # the receiver's paho client and the sender's, each by itself
    assert blackhole["lost"] + stop["lost"] == result.summary.lost
    assert port_open(port)  # started again after its 3 s


def test_a_service_found_by_its_command_line_is_paused_resumed_and_killed(tmp_path: Path) -> None:
    marker = f"maestro-match-{uuid.uuid4().hex[:8]}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)", marker]
    procs = [subprocess.Popen(sleeper)]
    try:
        _wait_for_cmdline(procs[0].pid, marker)
        target = ServiceTarget(Service(ServiceConfig("broker", match=marker), tmp_path))
        assert target.service.pid() == procs[0].pid
        change = asyncio.run(target.apply("pause", {}))
        assert change is not None and change.restore == "resume"
        _wait_for_state(procs[0].pid, "T")  # the kernel stops it when it next runs: a moment later when busy
        asyncio.run(target.apply("resume", {}))
        assert process_state(procs[0].pid) in ("S", "R")
        procs.append(subprocess.Popen(sleeper))
        _wait_for_cmdline(procs[1].pid, marker)  # until its exec, a child shows its parent's command line
        with pytest.raises(PeerError, match="2 processes match"):
            target.service.pid()
        procs[1].kill()
        procs[1].wait()
        asyncio.run(target.apply("kill", {}))
        assert procs[0].wait(5) == -9
        assert target.service.pid() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _wait_for_state(pid: int, state: str) -> None:
    deadline = time.monotonic() + 2
    while (now := process_state(pid)) != state:
        assert time.monotonic() < deadline, f"process {pid} is in state {now!r}, not {state!r}"
        time.sleep(0.005)


def _wait_for_cmdline(pid: int, text: str) -> None:
    deadline = time.monotonic() + 5
    while text.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"process {pid} never showed {text!r}"
        time.sleep(0.01)


def test_a_systemd_unit_service_is_driven_through_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd is not PID 1 on these machines, so `systemctl` here is a stand-in that speaks its
    command lines and drives a real process as systemd drives a unit's (tests/support): every
    action reaches the process, and an unknown unit is refused with systemctl's own words."""
    if Path("/run/systemd/system").is_dir():
        pytest.fail("systemd is PID 1 here: run this against a real unit instead of the stand-in")
    units = tmp_path / "units"
    units.mkdir()
    (units / "router.service").write_text(f"{sys.executable}\n-c\nimport time; time.sleep(600)\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    standin = Path(__file__).parent.parent / "support" / "systemctl_standin.py"
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\nexec {sys.executable} {standin} "$@"\n')
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SYSTEMCTL_STANDIN_DIR", str(units))

    service = Service(ServiceConfig("router", unit="router.service"), tmp_path)
    target = ServiceTarget(service)
    assert service.running() is False
    target._apply("start")
    pid = service.pid()
    assert pid is not None and service.running() and process_state(pid) in "RS"
    target._apply("pause")
    assert process_state(pid) == "T"
    target._apply("resume")
    assert process_state(pid) in "RS"
    target._apply("restart")
    restarted = service.pid()
    assert restarted is not None and restarted != pid and not _alive(pid)
    target._apply("pause")
    target._apply("stop")  # a paused unit is resumed first, or SIGTERM would wait for ever
    assert not service.running() and not _alive(restarted)
    asked = (units / "calls.log").read_text().splitlines()
    assert "kill --signal=SIGSTOP -- router.service" in asked and "kill --signal=SIGCONT -- router.service" in asked
    assert asked.count("start -- router.service") == 2 and asked.count("stop -- router.service") == 2

    missing = Service(ServiceConfig("gone", unit="maestro-test-nonexistent.service"), tmp_path)
    assert missing.running() is False
    with pytest.raises(PeerError, match=r"systemctl start -- maestro-test-nonexistent.service failed: .*not found"):
        missing.start()


def _alive(pid: int) -> bool:
    try:
        return process_state(pid) != "Z"
    except OSError:
        return False

"""A night in a lab of three hosts, on daemons started once, through two control-broker restarts.

Network namespaces stand in for the hosts (tests/support/lab.py): `lab-ctl` runs the control
broker, a Mosquitto with Debian's stock configuration, and the data server; `lab-snd` two senders;
`lab-rcv` two receivers, an inspector and an agent with a fault proxy. The Ansible role writes
their configuration and systemd units, and each unit's command line is started once, in its
host's namespace. Then tests/support/lab/night.py runs eight tests of six kinds back to back
from one `maestro run`, and ends with `maestro history`. Meanwhile this test plays the broker's
operator: during the nightly test's second run it restarts the control broker for 8 s, during
its third for 45 s.

Known answers: every test succeeds; each fixed-rate test's messages (rate x clients x senders x
seconds) are all received once; every peer's files are collected; the two outages are in their
tests' records, 8 s and 45 s long; the history lists the three runs; no daemon restarted; the
A-B-A check (the candidate the same broker through a proxy) is judged, and is no REGRESSION.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.lab import Lab, clean_environment, network_lab, write_units
from support.processes import BIN, Daemons, PrivateMosquitto, stock_mosquitto
from support.proxy_process import ProxyProcess

from coordinator.running.local import wait_for_port

pytestmark = [pytest.mark.netns, pytest.mark.rabbitmq, pytest.mark.ansible]

NIGHT = Path(__file__).resolve().parents[1] / "support" / "lab" / "night.py"
NIGHTLY = "lab night"  # night.py's nightly test
# The nightly test's runs (1st, 2nd, 3rd) during which the control broker restarts, and for how long.
RESTARTS = {2: 8.0, 3: 45.0}
RESTART_AFTER_S = 5.0  # into the run, by its live statistics: the load runs by then
DATA_PORT = 8080  # the role's default


@dataclass
class Operator:
    """Restarts the control broker during the nightly test's runs named in RESTARTS, as it
    sees them run on the data server's live listing."""

    data_server: str
    broker: PrivateMosquitto
    seen: list[str] = field(default_factory=list)  # the nightly runs' test ids, in order
    restarted: dict[str, float] = field(default_factory=dict)  # test id -> how long the broker was away
    failures: list[BaseException] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            while not self._done.wait(0.25):
                for row in _get(f"{self.data_server}/api/live"):
                    if row["name"] != NIGHTLY or row["state"] != "running":
                        continue
                    if row["test_id"] not in self.seen:
                        self.seen.append(row["test_id"])
                    gap = RESTARTS.get(self.seen.index(row["test_id"]) + 1)
                    if gap and row["test_id"] not in self.restarted and row["elapsed_s"] >= RESTART_AFTER_S:
                        self.restarted[row["test_id"]] = self.broker.restart(gap)
        except BaseException as exc:
            self.failures.append(exc)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(60)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _host_vars(lab: Lab) -> dict[str, dict[str, Any]]:
    """The inventory's variables: the daemons of each host, and the agent's fault proxy in
    front of the SUT."""
    ctl, rcv = lab.hosts["lab-ctl"], lab.hosts["lab-rcv"]
    return {
        "lab-ctl": {"maestro_data_listen": ctl.address, "maestro_data_port": DATA_PORT},
        "lab-snd": {"maestro_workers": [{"name": "s1", "role": "sender"}, {"name": "s2", "role": "sender"}]},
        "lab-rcv": {
            "maestro_workers": [{"name": "r1", "role": "receiver"}, {"name": "r2", "role": "receiver"}],
            "maestro_agent_proxies": {
                "sut-proxy": {"listen": f"{rcv.address}:5673", "upstream": f"{lab.gateway}:5672"}
            },
        },
    }


def _start_the_lab(lab: Lab, tmp_path: Path, daemons: Daemons) -> None:
    """Every unit the role wrote, in its host's namespace; the role's own Mosquitto excepted
    (its configuration sets TCP_NODELAY: the lab's broker here is a stock one)."""
    for host, units in write_units(lab, tmp_path / "hosts", _host_vars(lab)).items():
        for unit in units:
            if unit.name != "mosquitto":
                argv = lab.hosts[host].argv(*unit.argv)
                daemons.start_argv(unit.name, argv, clean_environment(unit), unit.working_directory)
    wait_for_port(DATA_PORT, lab.hosts["lab-ctl"].address, timeout_s=30)


def _records(results: Path) -> list[dict[str, Any]]:
    """Every test's test.json on the data server, oldest first (phases of a series left out)."""
    records = [json.loads(p.read_text()) for p in results.glob("*/test.json")]
    return sorted((r for r in records if not r.get("phase_of")), key=lambda r: r["started"])


def _judge_the_aba_check(records: list[dict[str, Any]], results: Path) -> None:
    """The night's A-B-A check, judged from the data server's files: six legs on the same
    daemons, and a verdict that is no REGRESSION (the same broker; two runs a leg may be too few
    to say PASS)."""
    aba = next(r for r in records if r["kind"] == "aba")
    legs = [s["test_id"].rsplit(".", 1)[1] for s in aba["steps"]]
    assert legs == ["a1-01", "a1-02", "b-01", "b-02", "a2-01", "a2-02"], legs
    judged = subprocess.run(
        [str(BIN / "maestro"), "aba", aba["test_id"], "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = judged.stderr.strip().splitlines()[-1]
    assert judged.returncode in (0, 5) and last.startswith(("aba: PASS: ", "aba: INCONCLUSIVE: ")), judged.stderr


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("rabbitmq")
def test_a_night_of_tests_in_a_lab_of_three_hosts_through_two_control_broker_restarts(tmp_path: Path) -> None:
    (tmp_path / "broker").mkdir()
    (tmp_path / "logs").mkdir()
    with network_lab() as lab, ProxyProcess(5672, listen_port=5672, listen_host=lab.gateway):
        ctl = lab.hosts["lab-ctl"]
        broker = stock_mosquitto(tmp_path / "broker", port=1883, host=ctl.address, netns=ctl.netns)
        broker.start()
        daemons = Daemons(broker.url, "/mpt", tmp_path / "logs")
        operator = None
        try:
            _start_the_lab(lab, tmp_path, daemons)
            data_server = f"http://{ctl.address}:{DATA_PORT}"
            operator = Operator(data_server, broker)
            env = {
                **os.environ,
                "LAB_SUT": f"amqp://guest:guest@{lab.gateway}:5672",
                "LAB_SUT_PROXY": f"amqp://guest:guest@{lab.hosts['lab-rcv'].address}:5673",
                "LAB_AGENT": "lab-rcv-agent",
                "LAB_NIGHT": uuid.uuid4().hex[:6],
            }
            argv = [str(BIN / "maestro"), "run", "--broker", broker.url, "--data-server", data_server, str(NIGHT)]
            night = subprocess.run(
                argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=780, check=False
            )
            alive = {name: proc.poll() is None for name, proc in daemons.procs.items()}
        finally:
            if operator is not None:
                operator.stop()
            daemons.kill_all()
            broker.stop()
    assert night.returncode == 0, night.stdout[-4000:] + night.stderr[-4000:]
    assert operator.failures == [] and len(operator.seen) == 3, (operator.failures, operator.seen)
    assert all(alive.values()), alive  # started once, up all night
    records = _records(tmp_path / "hosts" / "lab-ctl" / "results")
    kinds = [r["kind"] for r in records]
    assert kinds == [
        "fixed-rate",
        "request-reply",
        "fixed-rate",
        "incremental",
        "fixed-rate",
        "unbounded",
        "aba",
        "fixed-rate",
    ]
    for record in records:
        assert record["outcome"] == "success", (record["test_id"], record["reason"])
        # Every peer's files reached the data server (a series' phases each collected their own).
        assert all(why.endswith(" files") for why in record.get("collection", {}).values()), record["collection"]
    nightly = [r for r in records if r["name"] == NIGHTLY]
    assert [r["test_id"] for r in nightly] == operator.seen
    for run, record in enumerate(nightly, start=1):
        s = record["summary"]
        # 2 senders x 2 clients x 50 msg/s x 55 s, each received once, whatever the broker did.
        assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (11000, 11000, 0, 0), (run, s)
        outages = [o["seconds"] for o in record["control_outages"]]
        if run in RESTARTS:
            # From the broker's stop to the coordinator's return: at most its reconnect backoff
            # (2 s) and a second more after the broker listened again.
            (seconds,) = outages
            assert RESTARTS[run] <= seconds <= operator.restarted[record["test_id"]] + 3, (run, outages)
        else:
            assert outages == [], (run, outages)
    fault = next(r for r in records if r["name"] == "lab night fault")
    assert [(e["action"], e["phase"]) for e in fault["events"] if e.get("target") == "sut-proxy"] == [
        ("latency", "start"),
        ("latency", "end"),
    ]
    _judge_the_aba_check(records, tmp_path / "hosts" / "lab-ctl" / "results")
    # The night ends with the nightly test's history: its three runs, all of them successes.
    rows = [line.split() for line in night.stdout.splitlines()]
    listed = [(row[1], row[3]) for row in rows if len(row) > 3 and row[1] in operator.seen]
    assert listed == [(test_id, "success") for test_id in operator.seen], night.stdout[-3000:]

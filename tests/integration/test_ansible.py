"""The Ansible playbooks, linted and run for real against this machine (ansible_connection=local).

Two inventory hosts stand for two lab nodes: both are this machine, each with its own prefix,
so their virtualenvs, configuration and daemons are separate. There is no systemd here (it is
not PID 1), so the playbooks run in their process mode: each daemon under maestro-supervise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.ansible import ANSIBLE_DIR, BIN, ansible_env, changed, recap, run_playbook

from agent.config import load_config
from coordinator import FixedRateTest, Maestro
from protocol.embedded_broker import free_port

REPO = ANSIBLE_DIR.parent
PLAYBOOKS = ("site.yml", "upgrade.yml", "teardown.yml", "topology.yml", "check.yml")
# With maestro_mosquitto_acl, the files that hold a control broker password: etc/NAME.broker of
# each daemon, and of the coordinators (maestro) on the control node.
BROKER_FILES = {"node-a": {"s1", "node-a-agent", "maestro"}, "node-b": {"r1", "w3", "node-b-inspector"}}
PEERS = {"s1", "r1", "w3", "node-b-inspector", "node-a-agent"}
LAB_KEY = "lab-note-key-0f3c9a1e7d"
LAB_TOKEN = "lab-upload-token-5b21"

pytestmark = [pytest.mark.ansible]


def _playbook(home: Path, inventory: Path, playbook: str, *extra: str) -> str:
    result = run_playbook(home, inventory, playbook, *extra)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def _processes_under(prefix: Path) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(prefix) in cmdline and state != "Z":
            out.append(f"{proc.name}: {cmdline}")
    return out


def _peers(broker_url: str, key_file: Path | None) -> dict[str, dict[str, object]]:
    """`maestro peers`, signing its PING with the deployed key (keyed peers refuse others)."""
    keyed = ["--key-file", str(key_file)] if key_file else []
    result = subprocess.run(
        [str(BIN / "maestro"), *keyed, "peers", "--json", "--broker", broker_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {peer["name"]: peer for peer in json.loads(result.stdout)}


def _wait_for_peers(
    broker_url: str, key_file: Path, names: set[str], until: float = 30.0
) -> dict[str, dict[str, object]]:
    deadline = time.monotonic() + until
    while True:
        peers = _peers(broker_url, key_file)
        if names <= set(peers) or time.monotonic() > deadline:
            return peers
        time.sleep(1)


@dataclass
class Lab:
    root: Path
    inventory: Path
    broker_url: str
    data_url: str

    def prefix(self, node: str) -> Path:
        return self.root / node

    @property
    def key_file(self) -> Path:
        return self.prefix("node-a") / "etc/note.key"

    @property
    def coordinator_url(self) -> str:
        """With maestro_mosquitto_acl: the control node's coordinators' login, as maestro.env names it."""
        return f"@{self.prefix('node-a') / 'etc/maestro.broker'}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("lab")
    control_port, data_port = free_port(), free_port()
    inventory = root / "inventory.ini"
    node_b_workers = json.dumps([{"name": "r1", "role": "receiver"}, {"name": "w3"}])
    # Structured values go on the host's line: Ansible reads [all:vars] values as strings.
    proxies = json.dumps({"sut-proxy": {"listen": "127.0.0.1:0", "upstream": "127.0.0.1:5672"}})
    services = json.dumps({"rabbit": {"match": "beam.smp"}})
    agent_vars = f"maestro_agent_proxies='{proxies}' maestro_agent_services='{services}'"
    inventory.write_text(
        f"""\
[all:vars]
ansible_connection=local
ansible_python_interpreter={sys.executable}
maestro_python={sys.executable}
maestro_control_port={control_port}
maestro_data_port={data_port}
maestro_data_listen=127.0.0.1
maestro_install_packages=false
maestro_note_key={LAB_KEY}
maestro_data_token={LAB_TOKEN}
# Mosquitto reads its password file and ACL as this user, under pytest's 0700 temporary folder.
maestro_mosquitto_user=root

[control]
node-a ansible_host=127.0.0.1 maestro_prefix={root}/node-a {agent_vars}

[data]
node-a

[workers]
node-a maestro_workers='[{{"name": "s1", "role": "sender"}}]'
node-b ansible_host=127.0.0.1 maestro_prefix={root}/node-b maestro_workers='{node_b_workers}'

[inspectors]
node-b

[agents]
node-a
"""
    )
    lab = Lab(root, inventory, f"mqtt://127.0.0.1:{control_port}", f"http://127.0.0.1:{data_port}")
    yield lab
    # Whatever a failed test left running goes, so that no daemon outlives the test run.
    for line in _processes_under(root):
        pid = int(line.split(":", 1)[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_every_playbook_passes_syntax_check_and_ansible_lint(tmp_path: Path) -> None:
    for playbook in PLAYBOOKS:
        result = subprocess.run(
            [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventory.example.ini", playbook],
            cwd=ANSIBLE_DIR,
            env=ansible_env(tmp_path),
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{playbook}: {result.stdout}{result.stderr}"
    lint = subprocess.run(
        [str(BIN / "ansible-lint"), "--nocolor"],
        cwd=ANSIBLE_DIR,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "Profile 'production' was required, and it passed" in lint.stdout + lint.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "maestro_note_key is empty"),
        ("short-key", "shorter than 16"),
        ("'                '", "maestro_note_key is empty"),  # 16 spaces: the daemons would read none
        ("'   short-key      '", "shorter than 16"),
        ("aaaaaaaaaaaaaaaaaaaa", "fewer than 10 distinct characters"),
    ],
)
def test_a_lab_without_a_cluster_key_is_refused_before_anything_is_installed(
    tmp_path: Path, key: str, why: str
) -> None:
    """#38: with an empty key every daemon obeys whoever reaches the control broker; the
    playbook stops first, saying how to make one, and builds and installs nothing."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"""\
[all:vars]
ansible_connection=local
ansible_python_interpreter={sys.executable}
maestro_note_key={key}

[control]
node-a ansible_host=127.0.0.1 maestro_prefix={tmp_path}/node-a

[data]
node-a

[workers]
node-a
"""
    )
    result = run_playbook(tmp_path / "ansible-home", inventory, "site.yml")
    assert result.returncode != 0, result.stdout[-3000:]
    assert why in result.stdout and "maestro keygen" in result.stdout and "maestro_unsigned=true" in result.stdout
    assert "Build or find the wheel" not in result.stdout and not (tmp_path / "node-a").exists()


@pytest.mark.rabbitmq
@pytest.mark.timeout(900)
def test_site_deploys_a_cluster_that_runs_a_test_then_upgrade_and_teardown(lab: Lab, rabbitmq: None) -> None:
    home = lab.root / "ansible-home"

    # 1. One playbook: a working cluster that `maestro peers` sees.
    first = recap(_playbook(home, lab.inventory, "site.yml"))
    assert first["node-a"]["changed"] > 0 and first["node-a"]["failed"] == 0
    peers = _wait_for_peers(lab.broker_url, lab.key_file, PEERS)
    assert set(peers) == PEERS
    assert _peers(lab.broker_url, None) == {}  # every peer takes only signed notes
    assert {peers["s1"]["role"], peers["r1"]["role"], peers["w3"]["role"]} == {"sender", "receiver", "other"}
    agent_toml = load_config(lab.prefix("node-a") / "etc/agent.toml")  # the agent's own parser reads it
    assert agent_toml.proxies["sut-proxy"].upstream == ("127.0.0.1", 5672)
    assert agent_toml.services["rabbit"].match == "beam.smp"
    env_file = (lab.prefix("node-b") / "etc/maestro.env").read_text()
    assert f"MAESTRO_BROKER={lab.broker_url}" in env_file and f"MAESTRO_DATA_SERVER={lab.data_url}" in env_file
    # The key and the token: in files only their owner reads, named by the coordinators' environment,
    # and nowhere else (every peer signs, as maestro_note_key_roles says by default).
    etc = lab.prefix("node-a") / "etc"
    key_file, token_file = etc / "note.key", etc / "data.token"
    assert key_file.read_text().strip() == LAB_KEY and token_file.read_text().strip() == LAB_TOKEN
    assert stat.S_IMODE(key_file.stat().st_mode) == stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert f"MAESTRO_KEY_FILE={lab.prefix('node-b')}/etc/note.key" in env_file
    for name in ("s1", "node-a-agent"):
        assert f"--key-file\n{key_file}\n" in (etc / f"{name}.args").read_text()
    assert f"--token-file\n{token_file}\n" in (etc / "data-server.args").read_text()

    # ... and a test runs on it, its files landing on the deployed data server.
    queue = f"ansible-{uuid.uuid4().hex[:8]}"
    with Maestro.connect(
        lab.broker_url, discover_s=1, data_server=lab.data_url, key_file=key_file, token_file=token_file
    ) as maestro:
        result = maestro.run(
            FixedRateTest(send_url=f"amqp://guest:guest@127.0.0.1:5672/{queue}", rate=50, size=64, duration="3s"),
            progress=False,
        )
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 150
    assert result.summary.lost == result.summary.duplicates == 0
    results = lab.prefix("node-a") / "results" / result.test_id
    assert (results / "test.json").is_file()
    assert (results / "sender/s1/peer.json").is_file() and (results / "receiver/r1/peer.json").is_file()

    written = [
        path
        for node in ("node-a", "node-b")
        for folder in ("etc", "log", "run", "results", "data")
        for path in (lab.prefix(node) / folder).rglob("*")
        if path.is_file() and path.name not in ("note.key", "data.token")
    ]
    assert written and not [p for p in written for secret in (LAB_KEY, LAB_TOKEN) if secret.encode() in p.read_bytes()]

    # 2. A second run changes nothing.
    assert changed(_playbook(home, lab.inventory, "site.yml")) == {"localhost": 0, "node-a": 0, "node-b": 0}

    # 3. The control broker's users and ACL, switched on.
    acl = ("-e", "maestro_mosquitto_acl=true")
    peers = _switch_the_acl_on(lab, home, acl, queue)

    # 4. A daemon that dies is restarted by its supervisor.
    pid_before = peers["s1"]["pid"]
    os.kill(int(str(pid_before)), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (peer := _peers(lab.coordinator_url, lab.key_file).get("s1")) is None or peer["pid"] == pid_before:
        assert time.monotonic() < deadline, "s1 was not restarted"
        time.sleep(1)

    # 5. An upgrade replaces the version in place and restarts the daemons on it.
    wheel = _wheel_with_version(lab.root / "upgrade", "0.1.1.post7")
    _playbook(home, lab.inventory, "upgrade.yml", "-e", f"maestro_wheel={wheel}", *acl)
    for node in ("node-a", "node-b"):
        version = subprocess.run(
            [str(lab.prefix(node) / "venv/bin/maestro-worker"), "--version"], capture_output=True, text=True, check=True
        )
        assert version.stdout.split() == ["maestro-worker", "0.1.1.post7"]
    peers = _wait_for_peers(lab.coordinator_url, lab.key_file, PEERS)
    assert {name: peer["version"] for name, peer in peers.items()} == dict.fromkeys(PEERS, "0.1.1.post7")

    # 6. Teardown leaves nothing running and keeps the results.
    _playbook(home, lab.inventory, "teardown.yml")
    assert _processes_under(lab.root) == []
    for node in ("node-a", "node-b"):
        assert not (lab.prefix(node) / "venv").exists()
        assert not (lab.prefix(node) / "etc").exists()
    assert (results / "test.json").is_file()


def _switch_the_acl_on(lab: Lab, home: Path, acl: tuple[str, ...], queue: str) -> dict[str, dict[str, object]]:
    """site.yml with maestro_mosquitto_acl: the daemons log in as themselves, an anonymous client is
    refused, a test runs signed under the ACL, a second run changes nothing, and the passwords are
    only in the files of mode 600 they belong in. The peers, as the coordinators see them."""
    output = _playbook(home, lab.inventory, "site.yml", *acl)
    peers = _wait_for_peers(lab.coordinator_url, lab.key_file, PEERS)
    assert set(peers) == PEERS
    refused = subprocess.run(
        [str(BIN / "maestro"), "--key-file", str(lab.key_file), "peers", "--broker", lab.broker_url, "--timeout", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0 and "not authori" in refused.stderr.lower(), refused.stderr
    with Maestro.connect(
        lab.coordinator_url,
        discover_s=1,
        data_server=lab.data_url,
        key_file=lab.key_file,
        token_file=lab.prefix("node-a") / "etc/data.token",
    ) as maestro:
        result = maestro.run(
            FixedRateTest(send_url=f"amqp://guest:guest@127.0.0.1:5672/{queue}", rate=50, size=64, duration="3s"),
            progress=False,
        )
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 150
    output += _playbook(home, lab.inventory, "site.yml", *acl)
    assert changed(output) == {"localhost": 0, "node-a": 0, "node-b": 0}
    passwords = [p.read_text().strip() for p in (lab.root / "credentials/mosquitto").glob("*") if "lock" not in p.name]
    assert len(passwords) == len(PEERS) + 1  # and the coordinators'
    assert not [password for password in passwords if password in output]
    holding = {
        str(path.relative_to(lab.root))
        for node in ("node-a", "node-b")
        for folder in ("etc", "log", "run", "results", "data")
        for path in (lab.prefix(node) / folder).rglob("*")
        if path.is_file() and any(password.encode() in path.read_bytes() for password in passwords)
    }
    assert holding == {f"{node}/etc/{name}.broker" for node, names in BROKER_FILES.items() for name in names}
    assert all(stat.S_IMODE((lab.root / path).stat().st_mode) == 0o600 for path in holding)
    return peers


def _wheel_with_version(where: Path, version: str) -> Path:
    """The project's wheel with another version number: what a new release would be."""
    source = where / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "test-artifacts"),
    )
    pyproject = source / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text(), count=1))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(where), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = where.glob("maestro_py-*.whl")
    return wheel


@pytest.mark.timeout(120)
def test_the_systemd_unit_is_one_systemd_accepts(tmp_path: Path) -> None:
    """The systemd mode cannot run here (systemd is not PID 1), but its unit can be checked."""
    unit = tmp_path / "maestro-w1.service"
    item = {"name": "w1", "exe": str(BIN / "maestro-worker"), "args": ["@/opt/maestro/etc/w1 (lab).args"]}
    variables = {"item": item, "maestro_prefix": str(tmp_path), "maestro_service_user": "root"}
    template = f"src=roles/maestro/templates/maestro.service.j2 dest={unit} mode=0644"
    subprocess.run(
        [
            str(BIN / "ansible"),
            "localhost",
            "-m",
            "ansible.builtin.template",
            "-e",
            json.dumps(variables),
            "-a",
            template,
        ],
        cwd=ANSIBLE_DIR,
        env=ansible_env(tmp_path),
        capture_output=True,
        check=True,
    )
    text = unit.read_text()
    assert f"ExecStart={BIN / 'maestro-worker'} '@/opt/maestro/etc/w1 (lab).args'" in text
    assert "Restart=on-failure" in text
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr

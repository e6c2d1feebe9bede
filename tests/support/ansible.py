"""Running the playbooks in ansible/ from the integration tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ANSIBLE_DIR = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent  # ansible-playbook, ansible-lint and maestro of the test venv


def ansible_env(home: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_HOME": str(home), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}


def run_playbook(home: Path, inventory: Path, playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
        cwd=ANSIBLE_DIR,
        env=ansible_env(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP lines: host -> {ok, changed, unreachable, failed, ...}."""
    hosts = {}
    for line in output[output.rindex("PLAY RECAP") :].splitlines()[1:]:
        if ":" in line:
            host, counts = line.split(":", 1)
            hosts[host.strip()] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def changed(output: str) -> dict[str, int]:
    return {host: counts["changed"] for host, counts in recap(output).items()}

#!/usr/bin/python
"""Ansible module: a daemon kept running by maestro-supervise, where systemd is not PID 1."""

from __future__ import annotations

DOCUMENTATION = r"""
module: maestro_process
short_description: Start, stop or restart a daemon under maestro-supervise (process mode)
description:
  - The process mode of the Maestro playbooks, for nodes where systemd is not PID 1 (containers,
    CI). The daemon runs under maestro-supervise, which restarts it when it fails.
  - Idempotent. C(started) changes nothing when the supervisor in the pid file is alive.
options:
  name:
    description: The service name, for messages.
    required: true
    type: str
  argv:
    description: The daemon's command line as a list (never a shell line).
    type: list
    elements: str
  pidfile:
    description: The supervisor's pid file.
    required: true
    type: path
  logfile:
    description: Where the daemon's standard output and error go (appended).
    type: path
  supervisor:
    description: The path of maestro-supervise.
    type: path
  python:
    description: The interpreter that runs the supervisor (default, the module's own).
    type: path
  chdir:
    description: The daemon's working directory.
    type: path
  state:
    description: What the daemon should be.
    choices: [started, stopped, restarted]
    default: started
    type: str
  stop_timeout:
    description: Seconds to wait for a clean stop before killing.
    default: 15
    type: float
"""

EXAMPLES = r"""
- name: Run a worker
  maestro_process:
    name: w1
    argv: [/opt/maestro/venv/bin/maestro-worker, "@/opt/maestro/etc/w1.args"]
    pidfile: /opt/maestro/run/w1.pid
    logfile: /opt/maestro/log/w1.log
    supervisor: /opt/maestro/bin/maestro-supervise
"""

RETURN = r"""
pid:
  description: The supervisor's pid, when running.
  type: int
  returned: always
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule


def _supervisor_pid(pidfile: str, supervisor: str | None) -> int | None:
    """The pid in the file, if that process is alive and is a supervisor of this pid file."""
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    if pidfile.encode() not in cmdline:
        return None  # a stale file whose pid now belongs to someone else
    if supervisor and not any(part.endswith(os.path.basename(supervisor).encode()) for part in cmdline):
        return None
    return pid


def _stop(pid: int, timeout_s: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}") or _is_zombie(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # the supervisor leads its own session


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _start(module: AnsibleModule) -> int:
    p = module.params
    argv = p["argv"] or []
    if not argv:
        module.fail_json(msg=f"{p['name']}: argv is required to start it")
    if not (os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)) and shutil.which(argv[0]) is None:
        module.fail_json(msg=f"{p['name']}: {argv[0]} is not an executable here")
    for path in (p["pidfile"], p["logfile"]):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    command = [p["python"] or sys.executable, p["supervisor"], "--pidfile", p["pidfile"], "--log", p["logfile"]]
    command += ["--stop-timeout", str(p["stop_timeout"]), "--", *argv]
    proc = subprocess.Popen(
        command,
        cwd=p["chdir"] or None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives the end of this Ansible task
        close_fds=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            module.fail_json(msg=f"{p['name']}: the supervisor exited with {proc.returncode}; see {p['logfile']}")
        if _supervisor_pid(p["pidfile"], p["supervisor"]) == proc.pid:
            return proc.pid
        time.sleep(0.05)
    module.fail_json(msg=f"{p['name']}: the supervisor did not write {p['pidfile']} within 10 s")
    return -1  # not reached


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "argv": {"type": "list", "elements": "str"},
            "pidfile": {"type": "path", "required": True},
            "logfile": {"type": "path"},
            "supervisor": {"type": "path"},
            "python": {"type": "path"},
            "chdir": {"type": "path"},
            "state": {"type": "str", "default": "started", "choices": ["started", "stopped", "restarted"]},
            "stop_timeout": {"type": "float", "default": 15.0},
        },
        required_if=[
            ("state", "started", ("supervisor", "logfile")),
            ("state", "restarted", ("supervisor", "logfile")),
        ],
        supports_check_mode=True,
    )
    p = module.params
    pid = _supervisor_pid(p["pidfile"], p["supervisor"])
    state = p["state"]
    if state == "started" and pid is not None:
        module.exit_json(changed=False, pid=pid)
    if state == "stopped" and pid is None:
        module.exit_json(changed=False, pid=None)
    if module.check_mode:
        module.exit_json(changed=True, pid=pid)
    if pid is not None:
        _stop(pid, p["stop_timeout"])
    if state == "stopped":
        module.exit_json(changed=True, pid=None)
    module.exit_json(changed=True, pid=_start(module))


if __name__ == "__main__":
    main()

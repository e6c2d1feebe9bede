"""Rules for the whole suite."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.machine_lock import the_machine

_BASETEMP: list[Path] = []  # the session's tmp_path root, once a test asked for a tmp_path
# The tests run in pytest-xdist workers (pyproject's addopts): each worker looks for the processes
# its tests left, and writes them to this file, which the controlling process reads to fail the
# run (a worker's exit status does not reach the run's).
_LEFTOVERS_FILE = "MAESTRO_TEST_LEFTOVERS_FILE"
# The folder of the locks by which a test marked `quiet` has the machine to itself (see below).
_QUIET_LOCKS = "MAESTRO_TEST_QUIET_LOCKS"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _LEFTOVERS_FILE not in os.environ:
        fd, name = tempfile.mkstemp(prefix="maestro-test-leftovers-")
        os.close(fd)
        os.environ[_LEFTOVERS_FILE] = name  # the workers start after this and inherit it
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        os.environ[_QUIET_LOCKS] = tempfile.mkdtemp(prefix="maestro-test-quiet-")


# Tests whose file is handed out first: the longest (a lab deployed with Ansible, 4.5-5 minutes;
# a night in a lab of network namespaces, 4-4.5 minutes) must not start last and leave the other
# workers idle at the end.
_FIRST = ("test_ansible.py", "test_lab_night.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order and grouping the workers get the tests in. Tests go out one at a time, to
    whichever worker is free, except:
    - tests that share a module-scoped fixture (a private broker, a deployed lab) stay together
      on one worker, so it is set up once;
    - the `quiet` tests go together, last: each one waits for every running test to finish and
      holds the others back meanwhile, so spread through the run they left the other workers
      idle behind whatever long test was running (5 minutes at worst);
    - the longest file first."""
    for item in items:
        if item.get_closest_marker("quiet") is not None:
            item.add_marker(pytest.mark.xdist_group("quiet"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.name))

    def turn(item: pytest.Item) -> int:
        if item.get_closest_marker("quiet") is not None:
            return 2
        return 0 if item.path.name in _FIRST else 1

    items.sort(key=turn)  # stable: each file's own order is kept


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test marked `quiet` measures rates or times against known answers, and a test running
    beside it in the other worker takes half of a two-core machine from it: in one CI run a sweep's
    8 clients got 248 requests/s where 4 had got 421. So every test holds the machine shared while
    it runs (set-up and tear-down included), and a quiet one holds it alone. The wait is outside
    the test's timeout (this wrapper is the outermost)."""
    folder = os.environ.get(_QUIET_LOCKS)
    if folder is None or not hasattr(item.config, "workerinput"):
        yield
        return
    with the_machine(Path(folder), alone=item.get_closest_marker("quiet") is not None):
        yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skipped test proves nothing: a run with skips fails, as one that ran no test does. And a
    test leaves no process behind: anything still running that this session started fails it."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"{skipped} test(s) skipped: failing the run (a skipped test proves nothing)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    record = Path(os.environ[_LEFTOVERS_FILE])
    if hasattr(session.config, "workerinput"):  # a worker: its own leftovers, for the controller
        leftovers = _leftover_processes()
        with record.open("a") as out:
            out.writelines(f"{pid}\t{argv[:200]}\n" for pid, argv in leftovers)
        _kill(leftovers)
        return
    if getattr(session.config.option, "numprocesses", None):  # the controller: its workers' findings
        lines = record.read_text().splitlines() if record.exists() else []
        leftovers = [(int(pid), argv) for pid, argv in (line.split("\t", 1) for line in lines)]
    else:
        leftovers = _leftover_processes()
        _kill(leftovers)
    record.unlink(missing_ok=True)
    if _QUIET_LOCKS in os.environ:
        shutil.rmtree(os.environ[_QUIET_LOCKS], ignore_errors=True)
    if leftovers:
        if reporter is not None:
            reporter.write_line("processes the tests started are still running (killed now):", red=True)
            for pid, argv in leftovers:
                reporter.write_line(f"  {pid}: {argv[:200]}", red=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _kill(processes: list[tuple[int, str]]) -> None:
    for pid, _ in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _leftover_processes() -> list[tuple[int, str]]:
    """This session's descendants, and any process whose command line names its temporary
    folder (a child an agent started and whose parent was killed is no descendant any more);
    given a few seconds to finish going. PySpark's gateway JVM lives as long as this process."""
    deadline = time.monotonic() + 5
    while True:
        found = [(pid, argv) for pid, argv in _ours() if "pyspark" not in argv]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _ours() -> list[tuple[int, str]]:
    me = os.getpid()
    parents: dict[int, int] = {}
    argvs: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie is gone already; its parent just has not reaped it
            continue
        parents[int(entry.name)] = int(fields[1])
        argvs[int(entry.name)] = argv
    found = []
    for pid, argv in argvs.items():
        if pid == me:
            continue
        ancestor, hops = parents.get(pid, 0), 0
        while ancestor not in (0, 1, me) and hops < 64:
            ancestor, hops = parents.get(ancestor, 0), hops + 1
        if ancestor == me or any(str(base) in argv for base in _BASETEMP):
            found.append((pid, argv))
    return found


@pytest.fixture(autouse=True)
def _remember_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not _BASETEMP:
        _BASETEMP.append(tmp_path_factory.getbasetemp())


@pytest.fixture(autouse=True)
def _unstored_results_in_the_tests_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test.json the data server could not take is kept on the coordinator's machine: in the
    test's folder, not in the checkout (coordinator processes the test starts inherit it)."""
    monkeypatch.setenv("MAESTRO_UNSTORED", str(tmp_path / "maestro-unstored"))


@pytest.fixture(autouse=True)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """Leaked sockets surface at garbage collection: collect here, so the test that leaked is the one that fails."""
    yield
    gc.collect()

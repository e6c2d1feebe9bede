"""Mutation score of the modules that compute figures (#35): how many small changes to their code
(a `<` made `<=`, a constant off by one, an argument dropped) the unit tests notice.

Runs mutmut over a copy of the checkout in a scratch folder (the checkout is never touched), with
the unit tests only (hermetic, and the tests that cover each function are the ones run against
its mutants), then prints per module: mutants, killed, survived, equivalent, and the score,
killed / (mutants - equivalent - excluded). A mutant the tests take too long on (a loop that no
longer ends) counts as killed: the suite noticed. Equivalent mutants (no test could tell them
apart from the code: the same behaviour by another road) are listed with why in
bench/mutation-equivalents.toml; each entry names the mutant and its changed line, and one whose
line no longer matches (the code moved) is not counted, and is named. The same file lists the
functions left out (excluded): glue the unit tests cannot run (Spark's), held by the
integration tests instead.

Prints figures; asserts nothing (the score is a measurement, as every bench's figure is).

    python bench/mutation.py                   # every module (~50 minutes on 2 cores: see bench/README.md)
    python bench/mutation.py protocol/hdr.py   # some of them
    python bench/mutation.py --changed main    # those changed since a git ref (the module or a test of it)
    python bench/mutation.py --show            # and each surviving mutant's diff
    python bench/mutation.py --smoke           # one small module against its own tests: that it still runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = Path(__file__).with_name("mutation-equivalents.toml")

MODULES = (
    "protocol/hdr.py",
    "protocol/sequences.py",
    "protocol/clock_correction.py",
    "worker/latency.py",
    "worker/schedule.py",
    "reports/summary.py",
    "reports/clocks.py",
    "reports/change_points.py",
    "reports/faults.py",
    "coordinator/running/statistics.py",
)
# What is copied into mutmut's folder and imported from there (the mutated modules import their
# neighbours; the editable install must not hand the tests the unmutated ones instead).
PACKAGES = ("protocol", "coordinator", "worker", "inspector", "agent", "reports")
UNIT_TESTS = "tests/unit"
DESELECTED = (
    # Judges the machine's timing, not a figure: its verdict would be the load's.
    "tests/unit/protocol/test_precise_timer.py",
    # 3 million and some 100,000 calls through mutmut's trampolines took 62 s and 26 s for each of
    # the schedule's mutants; its exact-sequence tests (test_measurement.py) judge them instead.
    "tests/unit/worker/test_measurement.py::test_uniform_schedule_is_exact_and_does_not_drift",
    "tests/unit/worker/test_measurement.py::test_the_due_messages_of_a_constant_rate_are_exactly_those_one_by_one_gives",
    # Reads every module's source (13 s) and runs none of the functions measured.
    "tests/unit/test_file_protocol.py::test_only_the_results_module_reads_or_writes_peer_json_itself",
    # Checks the documents' links and paths against the checkout, whose integration tests the
    # scratch copy leaves out: no code of the measured modules is in it.
    "tests/unit/test_docs_links.py",
)
# The smoke run: the smallest module, against the one test file that exercises it.
SMOKE_MODULES = ("coordinator/running/statistics.py",)
SMOKE_TESTS = ("tests/unit/coordinator/test_statistics.py", "tests/unit/coordinator/test_series.py")

_MARK = ".maestro-mutation"  # in a work folder: this bench made it

# mutmut's verdicts (mutmut.stats.status_by_exit_code) as this table counts them: a mutant that
# made the tests fail, crash or hang was noticed.
_NOTICED = {"killed", "timeout", "segfault", "caught by type check"}

# Loaded by the tests in each mutant's process (forked from mutmut's, which holds every module the
# unit tests import): the suite's gc.collect() after each test walked all those objects, a few
# tenths of a second a test; frozen, it walks only what the test made.
_PLUGIN = '''"""pytest plugin for mutation runs (bench/mutation.py)."""
import gc


def pytest_sessionstart(session):
    gc.freeze()
'''


@dataclass(frozen=True)
class Equivalent:
    mutant: str
    change: str  # the mutant's changed line(s), as mutmut shows them after "+", joined by " / "
    why: str


@dataclass
class ModuleScore:
    module: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    excluded: int = 0  # in a function the unit tests cannot run (listed with why)
    survivors: list[str] = field(default_factory=list)  # neither killed nor a listed equivalent

    @property
    def survived(self) -> int:
        return len(self.survivors)

    @property
    def score(self) -> float:
        judged = self.mutants - self.equivalent - self.excluded
        return 100.0 * self.killed / judged if judged else 100.0


def load_equivalents(path: Path = EQUIVALENTS) -> tuple[dict[str, Equivalent], dict[str, str]]:
    """The equivalent mutants by name, and the functions left out (mutmut's name for them: what
    precedes `__mutmut_`) with why."""
    listed = tomllib.loads(path.read_text())
    equivalents = {e["mutant"]: Equivalent(e["mutant"], e["change"], e["why"]) for e in listed.get("equivalent", [])}
    return equivalents, {e["function"]: e["why"] for e in listed.get("excluded", [])}


def changed_modules(base: str) -> list[str]:
    """The modules changed since `base` (committed or not), and those whose unit tests changed."""
    names = subprocess.run(
        ["git", "diff", "--name-only", base, "--", *PACKAGES, UNIT_TESTS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--", *PACKAGES, UNIT_TESTS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    changed = set(names) | set(untracked)
    tests = [ROOT / n for n in changed if n.startswith(UNIT_TESTS) and n.endswith(".py") and (ROOT / n).exists()]
    texts = [t.read_text() for t in tests]
    found = []
    for module in MODULES:
        dotted = module.removesuffix(".py").replace("/", ".")
        if module in changed or any(dotted in text for text in texts):
            found.append(module)
    return found


def prepare(work: Path, modules: list[str], tests: list[str]) -> None:
    """The checkout's files (tracked, or new and not ignored) without the integration tests, and
    mutmut's settings in its pyproject.toml."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if name.startswith("tests/integration/") or not source.is_file():
            continue
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (work / "_mutation_plugin.py").write_text(_PLUGIN)
    (work / _MARK).touch()
    others = sorted({name.split("/", 1)[0] for name in listed} - set(PACKAGES) - {"tests"})
    selection = [*tests, *(f"--deselect={d}" for d in DESELECTED)]
    settings = {
        "source_paths": list(PACKAGES),
        "only_mutate": modules,
        # Serial in each mutant's process (the suite's addopts ask pytest-xdist for three).
        "pytest_add_cli_args": ["-n", "0", "-p", "no:cacheprovider", "-p", "_mutation_plugin"],
        "pytest_add_cli_args_test_selection": selection,
        "also_copy": [*(o for o in others if (work / o).exists()), "_mutation_plugin.py"],
    }
    lines = ["", "[tool.mutmut]", *(f"{key} = {json.dumps(value)}" for key, value in settings.items())]
    with (work / "pyproject.toml").open("a") as f:
        f.write("\n".join(lines) + "\n")


def run_mutmut(work: Path, workers: int, log: Path) -> int:
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers)],
            check=False,
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    return done.returncode


def diff_of(work: Path, mutant: str, module: str) -> str:
    """The mutant's diff against the original function, as `mutmut show` prints it."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # noqa: PLC0415 - reads the folder's state

    here = Path.cwd()
    os.chdir(work)
    try:
        return str(get_diff_for_mutant(mutant, path=module))
    finally:
        os.chdir(here)


def _mutant_order(item: tuple[str, object]) -> tuple[str, int]:
    function, _, number = item[0].rpartition("__mutmut_")
    return function, int(number)


def changed_lines(diff: str) -> str:
    return " / ".join(
        line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")
    )


def scores(
    work: Path, modules: list[str], equivalents: dict[str, Equivalent], excluded: dict[str, str]
) -> tuple[list[ModuleScore], list[str]]:
    """Each module's counts from mutmut's records, and the equivalents listed that no longer match."""
    from mutmut.stats import status_by_exit_code  # noqa: PLC0415 - the bench's only mutmut import at the top level

    table, stale = [], []
    for module in modules:
        record = json.loads((work / "mutants" / f"{module}.meta").read_text())
        score = ModuleScore(module)
        for mutant, code in sorted(record["exit_code_by_key"].items(), key=_mutant_order):
            score.mutants += 1
            if mutant.rpartition("__mutmut_")[0] in excluded:
                score.excluded += 1
                continue
            status = status_by_exit_code[code]
            listed = equivalents.get(mutant)
            if status in _NOTICED:
                score.killed += 1
                if listed is not None:
                    stale.append(f"{mutant} is listed as equivalent but a test kills it")
            elif listed is not None and changed_lines(diff_of(work, mutant, module)) == listed.change:
                score.equivalent += 1
            else:
                if listed is not None:
                    stale.append(f"{mutant} is listed as equivalent, but its change is no longer `{listed.change}`")
                score.survivors.append(f"{mutant} ({status})")
        table.append(score)
    return table, stale


def print_table(table: list[ModuleScore], markdown: bool) -> None:
    total = ModuleScore(
        "all", *(sum(getattr(s, f) for s in table) for f in ("mutants", "killed", "equivalent", "excluded"))
    )
    total.survivors = [m for s in table for m in s.survivors]
    heads = ["module", "mutants", "killed", "survived", "equivalent", "excluded", "score"]
    rows = [
        [f"`{s.module}`" if markdown and s is not total else s.module]
        + [str(n) for n in (s.mutants, s.killed, s.survived, s.equivalent, s.excluded)]
        + [f"{s.score:.1f} %"]
        for s in [*table, total]
    ]
    if markdown:
        for row in [heads, ["---"] + ["---:"] * (len(heads) - 1), *rows]:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    for row in [heads, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def report(work: Path, table: list[ModuleScore], stale: list[str], show: bool) -> None:
    for line in stale:
        print(f"stale: {line}")
    survivors = [(s.module, m) for s in table for m in s.survivors]
    if survivors:
        print("\nsurvivors:")
    for module, mutant in survivors:
        print(f"  {mutant}")
        if show:
            print("    " + diff_of(work, mutant.split(" ", 1)[0], module).replace("\n", "\n    "))


def measure(work: Path, modules: list[str], tests: list[str], *, workers: int, markdown: bool, show: bool) -> None:
    started = time.monotonic()
    prepare(work, modules, tests)
    log = work / "mutmut.log"
    print(f"mutmut over {len(modules)} module(s) with {workers} worker(s); its output: {log}", flush=True)
    code = run_mutmut(work, workers, log)
    if code != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        sys.exit(f"mutmut failed (exit {code})")
    table, stale = scores(work, modules, *load_equivalents())
    print(f"{time.monotonic() - started:.0f} s\n")
    print_table(table, markdown)
    if not sum(s.mutants for s in table):
        sys.exit("no mutant was made: the run measured nothing")
    report(work, table, stale, show)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"paths among: {', '.join(MODULES)} (default: all)")
    parser.add_argument("--changed", metavar="REF", help="only the modules changed since REF, or whose tests changed")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_MODULES[0]} against {SMOKE_TESTS[0]} only")
    parser.add_argument("--workers", type=int, default=2, help="mutants tested at once (default: %(default)s)")
    parser.add_argument("--show", action="store_true", help="print each surviving mutant's diff")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown (bench/README.md)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="work in DIR and keep it (mutmut show/browse there)")
    args = parser.parse_args()

    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"not among the modules measured: {', '.join(unknown)}")
    tests = [UNIT_TESTS]
    if args.smoke:
        modules, tests = list(SMOKE_MODULES), list(SMOKE_TESTS)
    elif args.changed:
        modules = [m for m in changed_modules(args.changed) if not args.modules or m in args.modules]
    else:
        modules = list(args.modules or MODULES)
    if not modules:
        print(f"no measured module changed since {args.changed}")
        return

    work = args.keep or Path(tempfile.mkdtemp(prefix="maestro-mutation-"))
    if args.keep:
        # Emptied first, but only a folder this bench made: --keep . must not wipe the checkout.
        if work.exists() and any(work.iterdir()) and not (work / _MARK).exists():
            parser.error(f"{work} is not empty and not a folder of this bench's")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    try:
        measure(work, modules, tests, workers=args.workers, markdown=args.markdown, show=args.show)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Runs side by side: each key figure of two or more runs, its change against the first run, and
whether that change is beyond the figure's noise on the first run's testbed.

The noise is the gate's (reports.verdict.noise_of): a robust standard deviation over the runs of
the first run's name that are comparable with it (the same workload and testbed, neither failed
nor generator-bound), since the figure's last change point among them; the band is the gate's,
where a night of normal noise reaches once in 1,200 (reports.verdict.band_sigmas). A
change point inside those runs would widen it, so where fewer than `MIN_NOISE_RUNS` follow the
last one, every comparable run counts, as the gate does for a threshold in noise units; with
fewer than that in all, the noise is unknown and no change is marked.

reports.compare_page draws it; the data server (`/compare`, `/api/compare`) gathers the runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from protocol.figures import TestFigures
from protocol.json_value import JsonObject
from protocol.test_record import TestRecord
from protocol.testbed import testbed_fingerprint
from reports.history import COUNTED, FIGURES, Figure, Run, analyse, n_runs, run_of, worse_by
from reports.run_facts import workload_hash
from reports.verdict import Noise, noise_of

__all__ = [
    "MIN_NOISE_RUNS",
    "Change",
    "ComparedRun",
    "FigureRow",
    "NoiseBand",
    "comparison_json",
    "delta_table",
    "noise_bands",
    "previous_in",
    "previous_runs",
]

# As many as the gate needs before it judges a night (reports.verdict.GateRules.min_runs).
MIN_NOISE_RUNS = 5


@dataclass(frozen=True)
class ComparedRun:
    """One run as the comparison reads it: its figures (latency judged by its own bound), its
    receivers' arrivals by whole second (epoch s, reports.summary.receive_seconds) and its
    test.json."""

    test_id: str
    figures: TestFigures
    received_per_second: Mapping[int, int]
    record: TestRecord

    @property
    def name(self) -> str | None:
        return self.record.name or None

    @property
    def started(self) -> str:
        return self.record.started or ""

    @property
    def workload(self) -> str:
        return workload_hash(self.record.definition)

    @property
    def testbed(self) -> str:
        return testbed_fingerprint(self.record.testbed)

    def throughput(self) -> tuple[list[int], list[int]]:
        """Seconds since the first arrival, and the messages received in each: runs of
        different nights line up at their start. A second without an arrival is a 0 (an
        outage), not a gap a line would bridge."""
        if not self.received_per_second:
            return [], []
        first, last = min(self.received_per_second), max(self.received_per_second)
        return list(range(last - first + 1)), [self.received_per_second.get(s, 0) for s in range(first, last + 1)]


@dataclass(frozen=True)
class NoiseBand:
    """A figure's noise over `runs` comparable runs; `noise` None where they are too few."""

    runs: int
    noise: Noise | None = None

    def text(self, fig: Figure) -> str:
        if self.noise is None:
            return f"unknown ({n_runs(self.runs)})"
        how = f"({self.noise.band_sigmas:.1f} sigma of {n_runs(self.noise.runs)})"
        if fig.key in COUNTED:
            return f"±{100 * self.noise.band:.4f} points {how}"
        return f"±{100 * self.noise.band:.1f} % {how}"


@dataclass(frozen=True)
class Change:
    """A figure's change against the first run: percent of its level, or, for a COUNTED figure,
    percentage points of sent."""

    percent: float
    worse: bool
    beyond_noise: bool | None  # None: the noise is unknown

    def text(self, fig: Figure) -> str:
        return f"{self.percent:+.4f} points" if fig.key in COUNTED else f"{self.percent:+.1f} %"


@dataclass(frozen=True)
class FigureRow:
    figure: Figure
    values: tuple[float | None, ...]  # one per run; None where the run has no such figure
    changes: tuple[Change | None, ...]  # one per run after the first
    noise: NoiseBand


def delta_table(runs: Sequence[ComparedRun], noise: Mapping[str, NoiseBand]) -> list[FigureRow]:
    """Each key figure of each run, and its change against the first run's."""
    rows = []
    for fig in FIGURES:
        values = tuple(fig.read(run.figures) for run in runs)
        band = noise.get(fig.key, NoiseBand(0))
        rows.append(FigureRow(fig, values, tuple(_change(fig, values[0], v, band) for v in values[1:]), band))
    return rows


def _change(fig: Figure, first: float | None, value: float | None, band: NoiseBand) -> Change | None:
    if first is None or value is None or (fig.key not in COUNTED and not first):
        return None  # no figure on one side, or no level to be relative to
    moved = value - first if fig.key in COUNTED else (value - first) / first
    beyond = None if band.noise is None else abs(moved) > band.noise.band
    return Change(100 * moved, worse_by(fig, first, value) > 0, beyond)


def noise_bands(history: Sequence[Run], workload: str, testbed: str) -> dict[str, NoiseBand]:
    """Each figure's noise over the runs of `history` (one name's, oldest first) of this
    workload and testbed that measured the SUT (module docstring)."""
    comparable = [r for r in history if not r.excluded and r.workload == workload and r.testbed == testbed]
    shifts = analyse("", comparable).shifts if len(comparable) >= MIN_NOISE_RUNS else {}
    bands = {}
    for fig in FIGURES:
        every = [v for r in comparable if (v := r.figures.get(fig.key)) is not None]
        last = shifts.get(fig.key, [])
        since = [v for r in comparable[last[-1].run - 1 :] if (v := r.figures.get(fig.key)) is not None] if last else []
        values = since if len(since) >= MIN_NOISE_RUNS else every
        known = len(values) >= MIN_NOISE_RUNS
        bands[fig.key] = NoiseBand(len(values), noise_of(values, relative=fig.key not in COUNTED) if known else None)
    return bands


def previous_in(runs: Iterable[Run], test_id: str, started: str) -> str | None:
    """The run of `runs` that started last before (`started`, `test_id`), if any."""
    earlier = [r for r in runs if (r.started, r.test_id) < (started, test_id)]
    return max(earlier, key=lambda r: (r.started, r.test_id)).test_id if earlier else None


def previous_runs(records: Iterable[TestRecord]) -> dict[str, str]:
    """Each finished run's previous run of the same name, by test id, from their test.json
    records (a phase of a series is no run: reports.history.run_of)."""
    by_name: dict[str, list[Run]] = {}
    for record in records:
        if record.name and (run := run_of(record)) is not None:
            by_name.setdefault(record.name, []).append(run)
    return {
        after.test_id: before.test_id
        for runs in by_name.values()
        for before, after in itertools.pairwise(sorted(runs, key=lambda r: (r.started, r.test_id)))
    }


def comparison_json(runs: Sequence[ComparedRun], rows: Sequence[FigureRow]) -> JsonObject:
    """The delta table as the data server's /api/compare answers it."""
    return {
        "runs": [
            {
                "test_id": r.test_id,
                "name": r.name,
                "started": r.started,
                "outcome": r.record.outcome,
                "latency_untrusted": r.figures.latency_untrusted,
            }
            for r in runs
        ],
        "figures": [
            {
                "key": row.figure.key,
                "title": row.figure.title,
                "unit": row.figure.unit,
                "values": list(row.values),
                "changes": [
                    None
                    if c is None
                    else {"percent": round(c.percent, 6), "worse": c.worse, "beyond_noise": c.beyond_noise}
                    for c in row.changes
                ],
                "noise": {
                    "runs": row.noise.runs,
                    "median": None if row.noise.noise is None else row.noise.noise.median,
                    "band": None if row.noise.noise is None else row.noise.noise.band,
                    "band_sigmas": None if row.noise.noise is None else row.noise.noise.band_sigmas,
                },
            }
            for row in rows
        ],
    }

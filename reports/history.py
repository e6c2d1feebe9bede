"""A test's history: every run of the test with one name, its key figures, and the change points
in each figure's series (reports.change_points). A nightly job gates a build on it instead of
on one baseline: a noisy night moves no change point, a lasting regression does.

Runs that failed or whose load generator was the limit are listed and marked, and left out of
the detection: their figures describe the failure or the generator, not the build. So are runs
not comparable with the newest: another workload or another testbed (reports.run_facts,
protocol.testbed) is another series, not a change of the build.
"""

from __future__ import annotations

import html
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go

from protocol.figures import TestFigures
from protocol.json_value import JsonObject
from protocol.test_record import TestRecord
from protocol.testbed import testbed_fingerprint
from reports.baseline import Thresholds
from reports.change_points import DEFAULT_LAST_RUNS, DEFAULT_MAX_P, change_points
from reports.page import ERRORS_JS, STYLE, figure, table
from reports.paths import result_dirs
from reports.run_facts import started_utc, sut_of, workload_hash
from reports.summary import read_test_record

log = logging.getLogger(__name__)
__all__ = [
    "FIGURES",
    "Figure",
    "History",
    "Run",
    "Shift",
    "analyse",
    "distribution_from",
    "gate",
    "history_page",
    "history_table",
    "n_runs",
    "read_runs",
    "run_of",
    "runs_from_dicts",
]


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    unit: str  # as people read it: the key keeps the unit it is stored in (`_us`)
    higher_is_better: bool
    read: Callable[[TestFigures], float | None]
    per_unit: float = 1.0  # stored values per unit read: 1,000 µs a ms

    def shown(self, value: float) -> float:
        return value / self.per_unit

    @property
    def headed(self) -> str:
        """The title with the unit its values read in, as a column's head: "Latency p99 (ms)"."""
        return f"{self.title} ({self.unit})"

    @property
    def is_latency(self) -> bool:
        return self.key.startswith("latency_")


def _latency(key: str) -> Callable[[TestFigures], float | None]:
    def read(figures: TestFigures) -> float | None:
        # A closed system's latency is its response time, timed on the requester's one clock: its
        # `latency_us` is the request leg alone, which a history of it once gated on.
        if figures.request_reply is not None:
            return _number(getattr(figures.request_reply.response_time_us, key))
        # A latency that is no figure (`latency_untrusted`) is not one in a history either; nor
        # is 0, which no run measures (HDR's least value and the clock correction's clamp are
        # 1 µs): it is a summary's latency left out (`latency_us` null), which read as 0 ms and
        # passed any gate.
        if figures.latency_untrusted:
            return None
        return _number(getattr(figures.latency_us, key)) or None

    return read


def _per_sent(key: str) -> Callable[[TestFigures], float | None]:
    def ratio(figures: TestFigures) -> float | None:
        sent, count = _number(figures.sent), _number(getattr(figures, key))
        if sent is None or count is None or sent < 0 or count < 0:  # a negative count is no count
            return None
        return count / sent if sent else 0.0

    return ratio


FIGURES = (
    Figure("receive_rate", "Receive rate", "msg/s", True, lambda figures: _number(figures.receive_rate.mean)),
    Figure("latency_p50_us", "Latency p50", "ms", False, _latency("p50"), 1000.0),
    Figure("latency_p99_us", "Latency p99", "ms", False, _latency("p99"), 1000.0),
    Figure("latency_p999_us", "Latency p99.9", "ms", False, _latency("p999"), 1000.0),
    Figure("loss_ratio", "Loss (lost / sent)", "ratio", False, _per_sent("lost")),
    Figure("duplicate_ratio", "Duplicates (duplicates / sent)", "ratio", False, _per_sent("duplicates")),
    # Only a test with faults has one: the slowest fault's (reports.fault_windows).
    Figure("recovery_s", "Recovery after faults", "s", False, lambda figures: _number(figures.recovery_s)),
)
# Figures that are counts of what went wrong, judged by how far they rose in ratio points; the
# others by how far they moved relative to their level.
COUNTED = frozenset({"loss_ratio", "duplicate_ratio"})


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Run:
    test_id: str
    started: str
    outcome: str
    figures: dict[str, float | None]
    generator_bound: bool = False
    reason: str | None = None
    workload: str = ""  # reports.run_facts.workload_hash of its definition
    testbed: str = ""  # protocol.testbed.testbed_fingerprint of its testbed
    # Its latency after the warm-up as (percentile, µs), the whole curve the gate compares; none
    # where the latency is no figure, or a closed system's (its response time has no curve).
    distribution: tuple[tuple[float, float], ...] = ()
    # Why its latency is no figure, where it kept its outcome without one (`untrusted_latency="warn"`).
    latency_untrusted: str | None = None

    @property
    def excluded(self) -> str | None:
        """Why the detection leaves this run out, if it does."""
        if self.outcome != "success":
            return "invalid" if self.outcome == "invalid" else "failed"
        if self.generator_bound:
            return "generator-bound"
        return None


def run_of(record: TestRecord) -> Run | None:
    """A run from its test.json; None while it has no figures (running, never summarised, or
    the data server had none), and for a phase of a series other than a repetition: one step of
    a sweep or a search is not a night's run, where each repetition of a repeated test is one of
    its workload (its parent, with no figures of its own, is none)."""
    figures = record.summary
    if figures is None or figures.error is not None or (record.phase_of and record.repetition is None):
        return None
    return Run(
        test_id=record.test_id,
        started=started_utc(record),
        outcome=record.outcome or "unknown",
        figures={f.key: f.read(figures) for f in FIGURES},
        generator_bound=any(p.generator_bound for p in figures.peers),
        reason=record.reason,
        workload=workload_hash(record.definition),
        testbed=testbed_fingerprint(record.testbed),
        distribution=_distribution_of(figures),
        # A closed system's latency figures are its response time, on one clock: they stand.
        latency_untrusted=figures.latency_untrusted if figures.request_reply is None else None,
    )


def _distribution_of(figures: TestFigures) -> tuple[tuple[float, float], ...]:
    if figures.request_reply is not None or figures.latency_untrusted or not figures.latency_samples:
        return ()
    return tuple((float(p), float(us)) for p, us in figures.latency_distribution_us)


def distribution_from(value: object) -> tuple[tuple[float, float], ...]:
    """A run's distribution as JSON gave it back ([[percentile, µs], ...]); () for none or a
    value that is no such list."""
    if not isinstance(value, list | tuple):
        return ()
    points = []
    for point in value:
        if not isinstance(point, list | tuple) or len(point) != 2:
            return ()
        p, us = (_number(v) for v in point)
        if p is None or us is None:
            return ()
        points.append((p, us))
    return tuple(points)


def facts_of(record: TestRecord) -> JsonObject:
    """What a run ran against and on, as the results index keeps it beside its figures."""
    sut_kind, sut_version = sut_of(record)
    testbed = record.testbed or {}
    return {
        "sut_kind": sut_kind,
        "sut_version": sut_version,
        "client_libraries": testbed.get("client_libraries") or {},
        "testbed": testbed,
    }


def read_runs(root: Path, name: str) -> list[Run]:
    """Every run named `name` in a results folder, oldest first, read from the files (the
    results index, reports.results_index, keeps the same runs in a database)."""
    runs = []
    for directory in result_dirs(root):
        record = read_test_record(directory)
        if record is not None and record.name == name and (run := run_of(record)) is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: (r.started, r.test_id))


@dataclass(frozen=True)
class Shift:
    """A change point in one figure: the run it starts at, and the means either side."""

    test_id: str
    run: int  # 1-based position in the history, as the table numbers runs
    p_value: float
    before: float
    after: float

    @property
    def change_percent(self) -> float:
        return 100 * (self.after - self.before) / self.before if self.before else 0.0


@dataclass
class History:
    name: str
    runs: list[Run]
    shifts: dict[str, list[Shift]] = field(default_factory=dict)  # by figure key
    max_p: float = DEFAULT_MAX_P
    older: int = 0  # runs before `runs`, neither analysed nor shown (analyse's `last`)

    @property
    def newest(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    def left_out(self, run: Run) -> str | None:
        """Why the detection and the gate leave this run out, if they do: its own outcome, or
        another workload or testbed than the newest run's."""
        if run.excluded:
            return run.excluded
        newest = self.newest
        if newest is not None and run.workload != newest.workload:
            return "other workload"
        if newest is not None and run.testbed != newest.testbed:
            return "other testbed"
        return None

    def as_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "max_p": self.max_p,
            "older_runs": self.older,
            "runs": [asdict(r) | {"excluded": r.excluded, "left_out": self.left_out(r)} for r in self.runs],
            "change_points": {
                key: [asdict(s) | {"change_percent": round(s.change_percent, 3)} for s in shifts]
                for key, shifts in self.shifts.items()
            },
        }


def runs_from_dicts(rows: Iterable[Mapping[str, Any]]) -> list[Run]:
    """Runs as `History.as_dict` (and the data server's /api/history) lists them."""
    return [
        Run(
            test_id=str(r["test_id"]),
            started=str(r.get("started", "")),
            outcome=str(r.get("outcome", "unknown")),
            figures={f.key: _number((r.get("figures") or {}).get(f.key)) for f in FIGURES},
            generator_bound=bool(r.get("generator_bound")),
            reason=r.get("reason"),
            workload=str(r.get("workload") or ""),
            testbed=str(r.get("testbed") or ""),
            distribution=distribution_from(r.get("distribution")),
            latency_untrusted=r.get("latency_untrusted") if isinstance(r.get("latency_untrusted"), str) else None,
        )
        for r in rows
    ]


def analyse(name: str, runs: list[Run], max_p: float = DEFAULT_MAX_P, last: int = DEFAULT_LAST_RUNS) -> History:
    """Change points of each figure over the newest `last` runs that count (not failed, not
    generator-bound, the same workload and testbed as the newest run, the figure present)."""
    older = max(0, len(runs) - last)
    history = History(name, runs[older:], max_p=max_p, older=older)
    runs = history.runs
    for fig in FIGURES:
        counted = [
            (i, r) for i, r in enumerate(runs) if history.left_out(r) is None and r.figures.get(fig.key) is not None
        ]
        values = [float(r.figures[fig.key] or 0.0) for _, r in counted]
        history.shifts[fig.key] = [
            Shift(counted[c.index][1].test_id, counted[c.index][0] + 1, c.p_value, c.mean_before, c.mean_after)
            for c in change_points(values, max_p=max_p)
        ]
    return history


def n_runs(count: int, kind: str = "") -> str:
    """ "1 run", "12 comparable runs": a count of runs as a sentence says it ("1 runs" read in
    the gate's lines)."""
    return f"{count:,} {kind + ' ' if kind else ''}run" + ("" if count == 1 else "s")


def older_note(history: History) -> str:
    """What a history of more runs than it analyses says of the rest."""
    if not history.older:
        return ""
    return (
        f"{n_runs(history.older)} older than these {len(history.runs):,} left out: only the newest are analysed "
        "and shown (--last)"
    )


def limits_of(thresholds: Thresholds) -> dict[str, float]:
    """Each figure's threshold, by key: a fraction of its level, or ratio points (COUNTED)."""
    return {
        fig.key: {"receive_rate": thresholds.throughput_drop, "loss_ratio": thresholds.loss_rise}.get(
            fig.key, thresholds.duplicate_rise if fig.key == "duplicate_ratio" else thresholds.latency_rise
        )
        for fig in FIGURES
    }


def worse_by(fig: Figure, before: float, after: float) -> float:
    """How much worse `after` is than `before` (negative: better): ratio points for a COUNTED
    figure, else a fraction of `before` (0 when `before` is 0: no level to be relative to)."""
    if fig.key in COUNTED:
        return after - before
    if not before:
        return 0.0
    change = (after - before) / before
    return -change if fig.higher_is_better else change


def how_worse(fig: Figure, before: float, after: float, limit: float, stated: str = "") -> str:
    """The change in words, with its threshold: "fell 9.8 % (threshold 5 %)"; `stated`: the
    threshold as the user gave it, where the limit is not it ("3sigma", whose limit is a band)."""
    if fig.key in COUNTED:
        return f"rose from {before:.4%} to {after:.4%} (threshold +{limit:.4%} points)"
    percent = 100 * abs(after - before) / before if before else 0.0
    moved = "rose" if after > before else "fell"
    return f"{moved} {percent:.1f} % (threshold {stated or f'{100 * limit:.3g} %'})"


def gate(history: History, thresholds: Thresholds | dict[str, float]) -> list[str]:
    """Why the newest runs are a regression: for each figure whose last change point made it
    worse beyond its threshold (`limits_of`), a sentence. Empty when the newest runs are as good
    as before."""
    limits = limits_of(thresholds) if isinstance(thresholds, Thresholds) else thresholds
    found = []
    for fig in FIGURES:
        shifts = history.shifts.get(fig.key, [])
        if not shifts or fig.key not in limits:
            continue
        last = shifts[-1]
        if worse_by(fig, last.before, last.after) > limits[fig.key]:
            found.append(
                f"{fig.title} {how_worse(fig, last.before, last.after, limits[fig.key])} from run {last.run} "
                f"({last.test_id}) on: {_value(fig, last.before)} -> {_value(fig, last.after)} {fig.unit}, "
                f"p = {last.p_value:.3f}"
            )
    return found


def _value(fig: Figure, value: float | None) -> str:
    if value is None:
        return "-"
    if fig.key in COUNTED:
        return f"{value:.6f}"
    return f"{fig.shown(value):,.3f}" if fig.unit == "ms" else f"{fig.shown(value):,.1f}"


def _column(fig: Figure) -> str:
    """A figure's key with the unit its column reads in: latency_p99_ms."""
    return fig.key.removesuffix("_us") + "_ms" if fig.unit == "ms" else fig.key


def history_table(history: History) -> str:
    """The runs as a text table, with each figure's change points after it."""
    head = ["run", "test", "started", "outcome", *[_column(f) for f in FIGURES], "marks"]
    changes = {(key, s.run) for key, shifts in history.shifts.items() for s in shifts}
    rows = []
    for i, run in enumerate(history.runs, start=1):
        cells = [_value(f, run.figures.get(f.key)) + ("*" if (f.key, i) in changes else "") for f in FIGURES]
        rows.append([str(i), run.test_id, run.started[:19], run.outcome, *cells, history.left_out(run) or ""])
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *rows]]
    lines.append("* the first run after a change point")
    for fig in FIGURES:
        for s in history.shifts.get(fig.key, []):
            lines.append(
                f"change point in {fig.title}: at run {s.run} ({s.test_id}), {_value(fig, s.before)} -> "
                f"{_value(fig, s.after)} {fig.unit} ({s.change_percent:+.1f} %), p = {s.p_value:.3f}"
            )
    excluded = sum(1 for r in history.runs if r.excluded)
    if excluded:
        lines.append(f"{excluded} run(s) failed or generator-bound: listed, left out of the detection")
    unlike = sum(1 for r in history.runs if not r.excluded and history.left_out(r))
    if unlike:
        lines.append(f"{unlike} run(s) of another workload or testbed than the newest: listed, left out")
    if older := older_note(history):
        lines.append(older)
    return "\n".join(lines)


def history_page(
    history: History, plotly_src: str, results_url: str = "/results", compare_url: str = "/compare"
) -> str:
    """The history as an HTML page: one chart per figure, change points marked, and a link to
    the newest run side by side with the one before (the data server's `compare_url`)."""
    # A figure no run has (recovery, in a test without faults) has no chart.
    charts = [
        _chart(history, fig, results_url)
        for fig in FIGURES
        if any(r.figures.get(fig.key) is not None for r in history.runs)
    ]
    rows = [
        {
            "run": i,
            "test": f'<a href="{results_url}/{html.escape(r.test_id)}">{html.escape(r.test_id)}</a>',
            "started (UTC)": r.started[:19],
            "outcome": r.outcome,
            **{f.headed: _value(f, r.figures.get(f.key)) for f in FIGURES},
            "marks": history.left_out(r) or "",
        }
        for i, r in enumerate(history.runs, start=1)
    ]
    columns = ["run", "test", "started (UTC)", "outcome", *[f.headed for f in FIGURES], "marks"]
    shifts = [
        {
            "figure": fig.headed,
            "run": s.run,
            "test": s.test_id,
            "before": _value(fig, s.before),
            "after": _value(fig, s.after),
            "change %": round(s.change_percent, 2),
            "p": round(s.p_value, 4),
        }
        for fig in FIGURES
        for s in history.shifts.get(fig.key, [])
    ]
    title = html.escape(f"History of {history.name}")
    found = (
        table(shifts, ["figure", "run", "test", "before", "after", "change %", "p"])
        if shifts
        else "<p id='no-change-points'>No change point.</p>"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
{ERRORS_JS}<script src="{html.escape(plotly_src)}"></script><style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p>{n_runs(len(history.runs))}. Change points by E-divisive means with a permutation test at p &le; {history.max_p};
failed and generator-bound runs, and runs of another workload or testbed than the newest (marked &times;), are
left out of the detection. A point opens its run's report.</p>
{f"<p id='older'>{html.escape(older_note(history))}.</p>" if history.older else ""}
{_compare_link(history, compare_url)}
<h2>Change points</h2>{found}
{"".join(charts)}{_POINTS_LINK_JS}
<h2>Runs</h2>{table(rows, columns, raw=frozenset({"test"}))}
</body></html>
"""


def _compare_link(history: History, compare_url: str) -> str:
    if len(history.runs) < 2:
        return ""
    before, newest = (r.test_id for r in history.runs[-2:])
    ids = ",".join(quote(t, safe="") for t in (before, newest))
    return (
        f'<p><a id="compare-newest" href="{html.escape(compare_url)}?ids={html.escape(ids)}">'
        f"The newest run ({html.escape(newest)}) side by side with the one before ({html.escape(before)})</a></p>"
    )


def _chart(history: History, fig: Figure, results_url: str) -> str:
    counted = [(i, r) for i, r in enumerate(history.runs, start=1) if r.figures.get(fig.key) is not None]
    kept = [(i, r) for i, r in counted if history.left_out(r) is None]
    left = [(i, r) for i, r in counted if history.left_out(r) is not None]
    chart = go.Figure()
    for runs, name, mode, marker in (
        (kept, fig.title, "lines+markers", {}),
        (left, "left out", "markers", {"symbol": "x", "size": 10, "color": "#b00020"}),
    ):
        if runs:
            chart.add_trace(
                go.Scatter(
                    x=[i for i, _ in runs],
                    y=[fig.shown(r.figures[fig.key] or 0.0) for _, r in runs],
                    mode=mode,
                    name=name,
                    marker=marker,
                    text=[f"{r.test_id}<br>{r.started[:19]}<br>{history.left_out(r) or ''}" for _, r in runs],
                    customdata=[f"{results_url}/{r.test_id}" for _, r in runs],
                )
            )
    for s in history.shifts.get(fig.key, []):
        chart.add_vline(
            x=s.run - 0.5, line_dash="dash", line_color="#b00020", annotation_text=f"{s.change_percent:+.1f} %"
        )
    # Whole runs only, dated; and the y axis from 0, so that 0.3 % of noise does not fill it.
    ticks = _run_ticks(history.runs)
    chart.update_xaxes(title="run", tickmode="array", tickvals=[i for i, _ in ticks], ticktext=[t for _, t in ticks])
    chart.update_yaxes(rangemode="tozero")
    return f'<div class="history-chart" data-figure="{fig.key}">{figure(chart, fig.title, fig.unit)}</div>'


def _run_ticks(runs: list[Run], most: int = 12) -> list[tuple[int, str]]:
    """At most `most` whole-run ticks, each with its run's date."""
    step = max(1, math.ceil(len(runs) / most))
    return [(i, f"{i}<br>{runs[i - 1].started[:10]}") for i in range(1, len(runs) + 1, step)]


# A click on a point opens its run (each point's customdata is its URL).
_POINTS_LINK_JS = """<script>
document.querySelectorAll('.history-chart .plotly-graph-div').forEach(div => {
  div.on('plotly_click', e => { const url = e.points[0].customdata; if (url) window.location.href = url; });
});
</script>"""

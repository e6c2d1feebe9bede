"""A test's history: every run of the test with one name, its key figures, and the change points
in each figure's series (reports.change_points). A nightly job gates a build on it instead of
on one baseline: a noisy night moves no change point, a lasting regression does.

Runs that failed or whose load generator was the limit are listed and marked, and left out of
the detection: their figures describe the failure or the generator, not the build.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from reports.baseline import Thresholds
from reports.change_points import DEFAULT_MAX_P, change_points
from reports.page import ERRORS_JS, STYLE, figure, table
from reports.summary import read_test_json

__all__ = [
    "FIGURES",
    "Figure",
    "History",
    "Run",
    "Shift",
    "analyse",
    "gate",
    "history_page",
    "history_table",
    "read_runs",
    "run_of",
    "runs_from_dicts",
]


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    read: Callable[[dict[str, Any]], float | None]  # from a summary


def _latency(key: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda summary: _number((summary.get("latency_us") or {}).get(key))


def _loss_ratio(summary: dict[str, Any]) -> float | None:
    sent, lost = _number(summary.get("sent")), _number(summary.get("lost"))
    return None if sent is None or lost is None else (lost / sent if sent else 0.0)


FIGURES = (
    Figure("receive_rate", "Receive rate", "msg/s", True, lambda s: _number((s.get("receive_rate") or {}).get("mean"))),
    Figure("latency_p50_us", "Latency p50", "µs", False, _latency("p50")),
    Figure("latency_p99_us", "Latency p99", "µs", False, _latency("p99")),
    Figure("latency_p999_us", "Latency p99.9", "µs", False, _latency("p999")),
    Figure("loss_ratio", "Loss (lost / sent)", "ratio", False, _loss_ratio),
)


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

    @property
    def excluded(self) -> str | None:
        """Why the detection leaves this run out, if it does."""
        if self.outcome != "success":
            return "failed"
        if self.generator_bound:
            return "generator-bound"
        return None


def run_of(record: dict[str, Any]) -> Run | None:
    """A run from its test.json; None while it has no figures (running, or never summarised),
    and for a phase of a series: one step of a sweep or a search is not a night's run."""
    summary = record.get("summary")
    if not isinstance(summary, dict) or "sent" not in summary or record.get("phase_of"):
        return None
    peers = summary.get("peers") or []
    return Run(
        test_id=str(record.get("test_id")),
        started=str(record.get("started") or ""),
        outcome=str(record.get("outcome") or "unknown"),
        figures={f.key: f.read(summary) for f in FIGURES},
        generator_bound=any(isinstance(p, dict) and p.get("generator_bound") for p in peers),
    )


def read_runs(root: Path, name: str) -> list[Run]:
    """Every run named `name` in a results folder, oldest first."""
    runs = []
    for directory in root.iterdir():
        if directory.is_dir() and not directory.name.startswith("."):
            record = read_test_json(directory)
            if record.get("name") == name and (run := run_of(record)) is not None:
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "max_p": self.max_p,
            "runs": [asdict(r) | {"excluded": r.excluded} for r in self.runs],
            "change_points": {
                key: [asdict(s) | {"change_percent": round(s.change_percent, 3)} for s in shifts]
                for key, shifts in self.shifts.items()
            },
        }


def runs_from_dicts(rows: Iterable[dict[str, Any]]) -> list[Run]:
    """Runs as `History.as_dict` (and the data server's /api/history) lists them."""
    return [
        Run(
            test_id=str(r["test_id"]),
            started=str(r.get("started", "")),
            outcome=str(r.get("outcome", "unknown")),
            figures={f.key: _number((r.get("figures") or {}).get(f.key)) for f in FIGURES},
            generator_bound=bool(r.get("generator_bound")),
        )
        for r in rows
    ]


def analyse(name: str, runs: list[Run], max_p: float = DEFAULT_MAX_P) -> History:
    """Change points of each figure over the runs that count (not failed, not generator-bound,
    the figure present)."""
    history = History(name, runs, max_p=max_p)
    for fig in FIGURES:
        counted = [(i, r) for i, r in enumerate(runs) if r.excluded is None and r.figures.get(fig.key) is not None]
        values = [float(r.figures[fig.key] or 0.0) for _, r in counted]
        history.shifts[fig.key] = [
            Shift(counted[c.index][1].test_id, counted[c.index][0] + 1, c.p_value, c.mean_before, c.mean_after)
            for c in change_points(values, max_p=max_p)
        ]
    return history


def gate(history: History, thresholds: Thresholds) -> list[str]:
    """Why the newest runs are a regression: for each figure whose last change point made it
    worse beyond its threshold, a sentence. Empty when the newest runs are as good as before."""
    found = []
    for fig in FIGURES:
        shifts = history.shifts.get(fig.key, [])
        if not shifts:
            continue
        last = shifts[-1]
        if fig.key == "loss_ratio":
            worse = last.after - last.before > thresholds.loss_rise
            how = f"rose from {last.before:.4%} to {last.after:.4%} (threshold +{thresholds.loss_rise:.4%} points)"
        elif fig.higher_is_better:
            worse = last.after < last.before * (1 - thresholds.throughput_drop)
            how = f"fell {-last.change_percent:.1f} % (threshold {100 * thresholds.throughput_drop:g} %)"
        else:
            worse = last.after > last.before * (1 + thresholds.latency_rise)
            how = f"rose {last.change_percent:.1f} % (threshold {100 * thresholds.latency_rise:g} %)"
        if worse:
            found.append(
                f"{fig.title} {how} from run {last.run} ({last.test_id}) on: "
                f"{_value(fig, last.before)} -> {_value(fig, last.after)} {fig.unit}, p = {last.p_value:.3f}"
            )
    return found


def _value(fig: Figure, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6f}" if fig.key == "loss_ratio" else f"{value:,.1f}"


def history_table(history: History) -> str:
    """The runs as a text table, with each figure's change points after it."""
    head = ["run", "test", "started", "outcome", *[f"{f.key}" for f in FIGURES], "marks"]
    changes = {(key, s.run) for key, shifts in history.shifts.items() for s in shifts}
    rows = []
    for i, run in enumerate(history.runs, start=1):
        cells = [_value(f, run.figures.get(f.key)) + ("*" if (f.key, i) in changes else "") for f in FIGURES]
        rows.append([str(i), run.test_id, run.started[:19], run.outcome, *cells, run.excluded or ""])
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
    return "\n".join(lines)


def history_page(history: History, plotly_src: str, results_url: str = "/results") -> str:
    """The history as an HTML page: one chart per figure, change points marked."""
    charts = [_chart(history, fig) for fig in FIGURES]
    rows = [
        {
            "run": i,
            "test": f'<a href="{results_url}/{html.escape(r.test_id)}">{html.escape(r.test_id)}</a>',
            "started": r.started[:19],
            "outcome": r.outcome,
            **{f.title: _value(f, r.figures.get(f.key)) for f in FIGURES},
            "marks": r.excluded or "",
        }
        for i, r in enumerate(history.runs, start=1)
    ]
    columns = ["run", "test", "started", "outcome", *[f.title for f in FIGURES], "marks"]
    shifts = [
        {
            "figure": fig.title,
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
<p>{len(history.runs)} runs. Change points by E-divisive means with a permutation test at p &le; {history.max_p};
failed and generator-bound runs (marked &times;) are left out of the detection.</p>
<h2>Change points</h2>{found}
{"".join(charts)}
<h2>Runs</h2>{table(rows, columns, raw=frozenset({"test"}))}
</body></html>
"""


def _chart(history: History, fig: Figure) -> str:
    counted = [(i, r) for i, r in enumerate(history.runs, start=1) if r.figures.get(fig.key) is not None]
    kept = [(i, r) for i, r in counted if r.excluded is None]
    left = [(i, r) for i, r in counted if r.excluded is not None]
    chart = go.Figure()
    for runs, name, mode, marker in (
        (kept, fig.title, "lines+markers", {}),
        (left, "failed or generator-bound", "markers", {"symbol": "x", "size": 10, "color": "#b00020"}),
    ):
        if runs:
            chart.add_trace(
                go.Scatter(
                    x=[i for i, _ in runs],
                    y=[r.figures[fig.key] for _, r in runs],
                    mode=mode,
                    name=name,
                    marker=marker,
                    text=[f"{r.test_id}<br>{r.started[:19]}" for _, r in runs],
                )
            )
    for s in history.shifts.get(fig.key, []):
        chart.add_vline(
            x=s.run - 0.5, line_dash="dash", line_color="#b00020", annotation_text=f"{s.change_percent:+.1f} %"
        )
    chart.update_xaxes(title="run")
    return f'<div class="history-chart" data-figure="{fig.key}">{figure(chart, fig.title, fig.unit)}</div>'

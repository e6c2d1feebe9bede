"""What every report page shares: summary.json, the page's style, charts and tables."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import plotly
import plotly.graph_objects as go

from protocol.clock_correction import untrusted_latency
from protocol.fail import FailConditions
from protocol.figures import SUMMARY_KEYS, TestFigures
from protocol.json_value import JsonObject
from protocol.test_record import TestRecord

__all__ = [
    "ERRORS_JS",
    "PLOTLY_JS",
    "STYLE",
    "SUMMARY_KEYS",
    "Row",
    "cell",
    "figure",
    "judged",
    "percentile_chart",
    "summary_json",
    "table",
]

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def judged(figures: TestFigures, record: TestRecord | None) -> TestFigures:
    """The figures with their latency judged by the test's own bound (test.json's definition)."""
    definition = record.definition if record is not None else {}
    bound = (definition.get("fail") or {}).get("latency_uncertainty_ratio")
    return figures.judged(
        untrusted_latency(figures, FailConditions.latency_uncertainty_ratio if bound is None else bound)
    )


def summary_json(figures: TestFigures, record: TestRecord | None) -> JsonObject:
    """The summary.json keys (DESIGN.md's, and the two on latency's trust), the outcome and
    reason as the coordinator judged them, and the latency judged by the test's own bound."""
    outcome, reason = (record.outcome, record.reason) if record is not None else (None, None)
    return judged(figures, record).summary_json(outcome, reason)


def figure(fig: go.Figure, title: str, y: str) -> str:
    fig.update_layout(
        title=title, yaxis_title=y, height=380, margin={"l": 60, "r": 20, "t": 50, "b": 40}, template="plotly_white"
    )
    return str(fig.to_html(full_html=False, include_plotlyjs=False))


def percentile_chart(curves: Sequence[tuple[str, Sequence[tuple[float, float]]]], title: str) -> str:
    """Latency by percentile, one curve per (name, ((percentile, µs), ...)), in ms on an
    HDR-style axis: x = 1 / (1 - percentile), so the tail gets the room it deserves."""
    fig = go.Figure()
    ticks: dict[float, str] = {}
    for name, points in curves:
        xs = [1 / (1 - min(p, 99.9999) / 100) for p, _ in points]
        ys = [value / 1000 for _, value in points]
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=name, text=[f"p{p:g}" for p, _ in points])
        ticks |= {x: f"{p:g}%" for x, (p, _) in zip(xs, points, strict=True)}
    fig.update_xaxes(type="log", tickvals=list(ticks), ticktext=list(ticks.values()), title="percentile")
    return figure(fig, title, "milliseconds")


# A table's row: its cells by column, each shown as `cell` shows it.
Row = Mapping[str, object]


def table(rows: Sequence[Row], columns: list[str], raw: frozenset[str] = frozenset()) -> str:
    """`raw`: columns whose cells are HTML already (links)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)

    def td(row: Row, column: str) -> str:
        return f"<td>{row.get(column, '') if column in raw else html.escape(cell(row.get(column)))}</td>"

    body = "".join("<tr>" + "".join(td(r, c) for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}h1{font-size:1.4em}
table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f4f4f4;cursor:pointer}.success{color:#17702a}.failure{color:#b00020}.invalid{color:#a15c00}
"""


# A script error is written onto the page itself, where a headless browser test can read it.
ERRORS_JS = """<script>window.addEventListener('error', e => {
  const root = document.documentElement;
  root.dataset.jsErrors = (root.dataset.jsErrors || '') + e.message + ';';
});</script>"""

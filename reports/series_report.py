"""The report of a test made of phases (incremental, search, repeated, sweep): its test.json holds
the phases' rows; each phase has a folder and a report of its own, linked from here.

- repeated: each figure as mean ± the 95 % confidence interval over the repetitions;
- sweep: a comparison table, and throughput and p99 latency against the swept parameter;
- incremental and search: the latency-vs-throughput curve and the maximum sustainable step;
- A-B-A: the candidate's verdict against both baselines under the default thresholds (reports.aba;
  `maestro aba TEST_ID` takes others).

`summary.json` carries DESIGN.md's keys for the phase that stands for the test (the maximum
sustainable step, the sweep's best point, the repetition nearest the mean), with the test's own
id, outcome and reason.
"""

from __future__ import annotations

import html
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from protocol.figures import write_summary_json
from protocol.test_record import Estimate, PhaseRow, TestRecord
from reports.aba import judge_aba, read_legs
from reports.page import ERRORS_JS, PLOTLY_JS, STYLE, figure, summary_json, table
from reports.summary import summarize
from reports.verdict import GateRules, Verdict

__all__ = ["build_series_report"]


def build_series_report(test_dir: Path, record: TestRecord) -> Path:
    steps = list(record.steps or ())
    kind = record.kind
    out = test_dir / "report"
    out.mkdir(exist_ok=True)
    shutil.copyfile(PLOTLY_JS, out / "plotly.min.js")

    stands_for = record.max_sustainable or record.best or (steps[-1] if steps else None)
    figures = summarize(test_dir.parent / stands_for.test_id) if stands_for else summarize(test_dir)
    summary = summary_json(figures, record) | {"test_id": test_dir.name}
    write_summary_json(out, summary)

    sections = []
    if kind == "repeated":
        sections.append(_statistics(record.statistics or {}))
    if kind == "sweep":
        sections.append(_sweep(list(record.comparison or ())))
    if kind == "aba":
        sections.append(_aba(test_dir))
    if kind in ("incremental", "search"):
        sections.append(_curve(steps))
        best = record.max_sustainable
        if best:
            sections.append(
                f"<p>Maximum sustainable: {best.receive_rate or 0:,.1f} msg/s received at "
                f"{best.target_rate or 0:,.0f} msg/s offered ({_link(best.test_id)}).</p>"
            )
    rows = [
        {
            **step.to_json(),
            "phase": _link(step.test_id),
            "p50 ms": _ms(step, "p50"),
            "p99 ms": _ms(step, "p99"),
        }
        for step in steps
    ]
    columns = ["phase", "target_rate", "send_rate", "receive_rate", "p50 ms", "p99 ms", "lost", "outcome", "reason"]
    outcome = record.outcome or "unknown"
    reason = f"<p>Reason: {html.escape(record.reason)}</p>" if record.reason else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(test_dir.name)}</title>
{ERRORS_JS}<script src="plotly.min.js"></script><style>{STYLE}</style></head><body>
<h1>Test {html.escape(test_dir.name)}: <span class="{html.escape(outcome)}">{html.escape(outcome)}</span></h1>
{reason}<p>{html.escape(record.name)} {html.escape(kind)}, {len(steps)} phases,
started {html.escape(record.started or "")}. Each phase has its own report.</p>
{"".join(sections)}
<h2>Phases</h2>
{table(rows, columns, raw=frozenset({"phase"}))}
</body></html>"""
    (out / "index.html").write_text(page)
    return out


def _link(test_id: str) -> str:
    safe = html.escape(test_id)
    return f'<a href="../../{safe}/report/index.html">{safe}</a>'


def _ms(step: PhaseRow, key: str) -> float | None:
    return getattr(step.latency_us, key) / 1000 if step.latency_us is not None else None


def _aba(test_dir: Path) -> str:
    verdict = judge_aba(read_legs(test_dir.parent, test_dir.name), GateRules())
    css = {Verdict.PASS: "success", Verdict.REGRESSION: "failure", Verdict.INCONCLUSIVE: "hint"}[verdict.verdict]
    findings = "".join(f"<li>{html.escape(f)}</li>" for f in verdict.findings)
    return (
        f'<h2>The candidate against both baselines</h2><p class="{css}">{html.escape(verdict.line)}</p>'
        + (f"<ul>{findings}</ul>" if findings else "")
        + "<p>Default thresholds (a 5 % drop, a 10 % rise); <code>maestro aba TEST_ID</code> takes others.</p>"
    )


def _statistics(statistics: Mapping[str, Estimate]) -> str:
    rows = []
    for name, s in statistics.items():
        scale, unit = (1000, "ms") if name.endswith("_us") else (1, "requests/s" if name == "throughput" else "msg/s")
        label = name.removesuffix("_us").replace("_", " ")
        low, high = (v / scale for v in s.ci95)
        rows.append(
            {
                "figure": f"{label}, {unit}",
                "mean": s.mean / scale,
                "± (95 %)": (high - low) / 2,
                "CI low": low,
                "CI high": high,
                "stdev": s.stdev / scale,
                "n": s.n,
            }
        )
    return "<h2>Over the repetitions: mean and 95 % confidence interval (Student's t)</h2>" + table(
        rows, ["figure", "mean", "± (95 %)", "CI low", "CI high", "stdev", "n"]
    )


def _sweep(comparison: list[PhaseRow]) -> str:
    if not comparison:
        return ""
    points = [row.point or {} for row in comparison]
    parameters = sorted({k for point in points for k in point})
    numeric = len(parameters) == 1 and all(isinstance(point.get(parameters[0]), int | float) for point in points)
    xs = [point[parameters[0]] if numeric else ", ".join(f"{k}={v}" for k, v in point.items()) for point in points]
    throughput = go.Figure()
    throughput.add_scatter(x=xs, y=[row.receive_rate for row in comparison], name="received, msg/s")
    if any(row.target_rate for row in comparison):  # a closed system offers no rate
        throughput.add_scatter(x=xs, y=[row.target_rate for row in comparison], name="offered, msg/s")
    latency = go.Figure()
    for key in ("p50", "p99"):
        latency.add_scatter(x=xs, y=[_ms(row, key) for row in comparison], name=f"{key} ms")
    axis = parameters[0] if numeric else "point"
    for fig in (throughput, latency):
        fig.update_xaxes(title=axis, type="linear" if numeric else "category")
    rows = [
        {**point, "receive_rate": row.receive_rate, "p99 ms": _ms(row, "p99"), "lost": row.lost, "outcome": row.outcome}
        for point, row in zip(points, comparison, strict=True)
    ]
    return (
        "<h2>Sweep</h2>"
        + table(rows, [*parameters, "receive_rate", "p99 ms", "lost", "outcome"])
        + _closed_system_curves(comparison, xs, axis, numeric)
        + figure(throughput, f"Throughput against {axis}", "messages per second")
        + figure(latency, f"Latency against {axis}", "milliseconds")
    )


def _closed_system_curves(comparison: list[PhaseRow], xs: list[Any], axis: str, numeric: bool) -> str:
    """A request/reply sweep (over the clients, as a rule): throughput and response time
    against the swept parameter, the two curves of a closed system."""
    if not any(row.reply is not None for row in comparison):
        return ""
    throughput = go.Figure()
    y = [row.reply.throughput_per_s if row.reply else None for row in comparison]
    throughput.add_scatter(x=xs, y=y, name="requests/s")
    response = go.Figure()
    for key in ("p50", "p99"):
        values = [getattr(row.reply.response_time_us, key) if row.reply else None for row in comparison]
        response.add_scatter(x=xs, y=[v / 1000 if v is not None else None for v in values], name=f"{key} ms")
    for fig in (throughput, response):
        fig.update_xaxes(title=axis, type="linear" if numeric else "category")
    return (
        '<h2 id="closed-system">Closed system</h2>'
        + figure(throughput, f"Throughput against {axis} (request/reply)", "requests per second")
        + figure(response, f"Response time against {axis} (request/reply)", "milliseconds")
    )


def _curve(steps: list[PhaseRow]) -> str:
    points = sorted((s for s in steps if s.receive_rate), key=lambda s: s.target_rate or 0.0)
    if not points:
        return ""
    fig = go.Figure()
    for key in ("p50", "p99"):
        fig.add_scatter(
            x=[s.receive_rate for s in points],
            y=[_ms(s, key) for s in points],
            mode="lines+markers",
            name=f"{key} ms",
            text=[f"offered {s.target_rate or 0:,.0f} msg/s, {s.outcome}" for s in points],
        )
    fig.update_xaxes(title="received, msg/s")
    return figure(fig, "Latency against throughput", "milliseconds")

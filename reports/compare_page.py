"""The page of two or more runs side by side (the data server's /compare): their receive
throughput over time overlaid, their latency percentile curves on one HDR axis, and the delta
table of reports.comparison with each figure's noise band. Plotly, from the server's offline
bundle, like the history page.

And the links to it from the pages `maestro report` writes (a report, the results index). Those
are files, and /compare is the data server's: their links are relative to the results root, as
the index's links to histories are, and say in their title that they open on `maestro serve`.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from protocol.test_record import TestRecord
from reports.comparison import Change, ComparedRun, FigureRow, NoiseBand, delta_table
from reports.history import COUNTED, Figure
from reports.page import ERRORS_JS, STYLE, figure, percentile_chart, table

__all__ = ["PICKED_JS", "compare_page", "index_cell", "previous_link"]

_STYLE = """
td.change.beyond-noise.worse{color:#b00020;font-weight:bold}td.change.beyond-noise.better{color:#17702a;font-weight:bold}
td.change.within-noise{color:#666}
"""


def compare_page(
    runs: Sequence[ComparedRun],
    noise: Mapping[str, NoiseBand],
    plotly_src: str,
    results_url: str = "/results",
    history_url: str = "/history",
) -> str:
    first = runs[0]
    title = html.escape("Runs side by side: " + ", ".join(r.test_id for r in runs))
    history = (
        f'runs named <a href="{history_url}/{urllib.parse.quote(first.name, safe="")}">{html.escape(first.name)}</a>'
        if first.name
        else "runs of the first run's name (it has none: the noise is unknown)"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
{ERRORS_JS}<script src="{html.escape(plotly_src)}"></script><style>{STYLE}{_STYLE}</style></head><body>
<h1>{title}</h1>
{_runs_table(runs, results_url)}
<h2>Key figures against {html.escape(first.test_id)}</h2>
<p>Each change is against the first run. The noise band is ±3 robust standard deviations of the figure over the
{history} with the first run's workload and testbed (those since its last change point, where there are
five or more); a change beyond it is marked, one within it is noise. Latency in µs; loss and duplicates as a share of
sent, their changes in percentage points. An empty cell: the run has no such figure (a latency that is no figure).</p>
{_delta_table(runs, delta_table(runs, noise))}
<h2>Over time</h2>
{_throughput_chart(runs)}
{_percentile_chart(runs)}
</body></html>
"""


def _runs_table(runs: Sequence[ComparedRun], results_url: str) -> str:
    first = runs[0]

    def like_first(run: ComparedRun) -> str:
        if run is first:
            return "the first run"
        same = {"workload": run.workload == first.workload, "testbed": run.testbed == first.testbed}
        differs = [what for what, alike in same.items() if not alike]
        return "other " + " and ".join(differs) if differs else "same workload and testbed"

    rows = [
        {
            "run": f'<a href="{results_url}/{urllib.parse.quote(r.test_id, safe="")}">{html.escape(r.test_id)}</a>',
            "name": r.name,
            "started": r.started[:19],
            "outcome": r.record.outcome,
            "reason": r.record.reason,
            "against the first": like_first(r),
        }
        for r in runs
    ]
    return '<div id="compared-runs">' + table(rows, list(rows[0]), raw=frozenset({"run"})) + "</div>"


def _delta_table(runs: Sequence[ComparedRun], rows: Sequence[FigureRow]) -> str:
    head = "<th>figure</th>" + "".join(
        f"<th>{html.escape(r.test_id)}</th>" + ("" if i == 0 else "<th>change</th>") for i, r in enumerate(runs)
    )
    body = []
    for row in rows:
        fig = row.figure
        cells = [f"<td>{html.escape(fig.title)} ({html.escape(fig.unit)})</td>"]
        for i, (run, value) in enumerate(zip(runs, row.values, strict=True)):
            where = f'data-figure="{fig.key}" data-run="{html.escape(run.test_id)}"'
            cells.append(f'<td class="value" {where}>{_value(fig, value)}</td>')
            if i:
                cells.append(_change_cell(fig, row.changes[i - 1], where))
        cells.append(f'<td class="noise" data-figure="{fig.key}">{html.escape(row.noise.text(fig))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="delta"><thead><tr>{head}<th>noise band</th></tr></thead><tbody>{"".join(body)}</tbody></table>'


def _value(fig: Figure, value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4%}" if fig.key in COUNTED else f"{value:,.1f}"


def _change_cell(fig: Figure, change: Change | None, where: str) -> str:
    if change is None:
        return f'<td class="change" {where}></td>'
    how = "worse" if change.worse else "better"
    if change.beyond_noise is None:
        return f'<td class="change" {where}>{change.text(fig)}</td>'
    if change.beyond_noise:
        return f'<td class="change beyond-noise {how}" {where}>{change.text(fig)}, {how} beyond the noise</td>'
    return f'<td class="change within-noise" {where}>{change.text(fig)}, within the noise</td>'


def _throughput_chart(runs: Sequence[ComparedRun]) -> str:
    fig = go.Figure()
    for run in runs:
        seconds, counts = run.throughput()
        fig.add_scatter(x=seconds, y=counts, mode="lines", name=run.test_id)
    fig.update_xaxes(title="seconds since the run's first arrival")
    chart = figure(fig, "Received per second", "messages per second")
    return f'<div class="compare-chart" id="throughput">{chart}</div>'


def _percentile_chart(runs: Sequence[ComparedRun]) -> str:
    """One curve per run that has a latency; a run without one says why, and draws nothing
    that would read as a latency."""
    curves, missing = [], []
    for run in runs:
        figures = run.figures
        if figures.latency_untrusted:
            missing.append(f"{run.test_id}: no latency figure: {figures.latency_untrusted}")
        elif not figures.latency_samples:
            missing.append(f"{run.test_id}: no latency sample")
        else:
            curves.append((run.test_id, figures.latency_distribution_us))
    title = "Latency by percentile (whole test after warm-up, corrected)"
    chart = percentile_chart(curves, title) if curves else ""
    notes = "".join(f'<p class="no-curve">{html.escape(why)}</p>' for why in missing)
    return f'<div class="compare-chart" id="percentiles">{chart}{notes}</div>'


_ON_SERVE = "opens where maestro serve serves these results, not from the files"


def previous_link(test_id: str, record: TestRecord) -> str:
    """A report's link to its run side by side with the run of its name before it, which the
    data server looks up when the link is followed (/compare/previous: a report written now
    names no run that is not there yet). None for a run without a name, or a series' phase
    other than a repetition (reports.history.run_of)."""
    name = record.name
    if not name or (record.phase_of and record.repetition is None):
        return ""
    href = f"../../../compare/previous/{urllib.parse.quote(test_id, safe='')}"  # from <root>/<test>/report/
    return (
        f'<p><a id="compare-previous" href="{href}" title="{_ON_SERVE}">This run side by side with the run named '
        f"{html.escape(str(name))} before it</a></p>"
    )


def index_cell(test_id: str, previous: str | None) -> str:
    """The results index's compare cell: a box to tick for "compare the ticked runs", and a
    link to the run side by side with the one of its name before it, where there is one."""
    own = html.escape(test_id)
    box = f'<input type="checkbox" class="pick" value="{own}" title="tick two to eight, then compare them">'
    if previous is None:
        return box
    ids = ",".join(urllib.parse.quote(t, safe="") for t in (previous, test_id))
    return f'{box} <a class="compare" href="compare?ids={html.escape(ids)}" title="{_ON_SERVE}">vs previous</a>'


# The index's "compare the ticked runs" button: to /compare with them, or why not.
PICKED_JS = f"""<p><button id="compare-picked" onclick="comparePicked()" title="{_ON_SERVE}">Compare the ticked
runs</button> <span id="compare-picked-why"></span></p>
<script>
function comparePicked() {{
  const ids = Array.from(document.querySelectorAll('input.pick:checked')).map(b => encodeURIComponent(b.value));
  if (ids.length < 2 || ids.length > 8) {{
    document.getElementById('compare-picked-why').textContent = `tick 2 to 8 runs (${{ids.length}} ticked)`;
    return;
  }}
  window.location.href = 'compare?ids=' + ids.join(',');
}}
</script>"""

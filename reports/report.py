"""`maestro report`: `<test>/report/index.html` and `summary.json` per test, and an index of
all tests at the results root. Charts are Plotly, with plotly.min.js copied beside each page:
a report works offline and from a copied folder.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from protocol.figures import RequestReplyFigures, SutCounters, TestFigures, read_summary_json, write_summary_json
from protocol.json_value import JsonObject
from protocol.options import megabytes_per_s
from protocol.test_record import Outage, PeerClock, TestRecord
from reports.accounting import destination_of
from reports.baseline import Comparison, Judged, Thresholds, compare
from reports.clocks import clock_corrections
from reports.compare_page import PICKED_JS, index_cell, previous_link
from reports.comparison import previous_runs
from reports.faults import fault_effects, peer_events, spark_gather, windows_from_events
from reports.inspector_panels import inspector_panels
from reports.page import (
    ERRORS_JS,
    PLOTLY_JS,
    STYLE,
    SUMMARY_KEYS,
    Row,
    cell,
    figure,
    judged,
    percentile_chart,
    summary_json,
    table,
)
from reports.paths import result_dirs
from reports.price import price_performance
from reports.series_report import build_series_report
from reports.summary import Peers, generator_bound, inspector_shortfalls, read_peers, read_test_record, summarize
from reports.time_series import inspector_tables, latency_series, report_series

__all__ = ["SUMMARY_KEYS", "build_index", "build_report", "summary_json"]

log = logging.getLogger(__name__)


# The keys DESIGN.md fixes for summary.json; tools outside the code rely on exactly these.
def _when(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def _rate_chart(
    rates: dict[tuple[str, str], dict[int, int]],
    events: Sequence[Mapping[str, Any]],
    outages: Sequence[Outage],
    closed: bool = False,
) -> str:
    """Each sender's and receiver's messages per second and their totals; a closed system's
    senders are its requesters and its receivers the repliers, and the lines say so."""
    fig = go.Figure()
    # The coordinator's control-broker outages: the load went on, the coordinator did not see it.
    for outage in outages:
        lost = datetime.fromisoformat(outage.lost)
        back = datetime.fromisoformat(outage.back) if outage.back else lost
        fig.add_vrect(x0=lost, x1=back, fillcolor="#999999", opacity=0.25, line_width=0)
        fig.add_annotation(x=lost, yref="paper", y=1.06, text="control broker down", showarrow=False, font={"size": 10})
    # Agent actions on the time axis: a line at each start and end.
    for event in events:
        if "time" not in event or "action" not in event:
            continue
        when = datetime.fromisoformat(event["time"])
        fig.add_shape(type="line", x0=when, x1=when, yref="paper", y0=0, y1=1, line={"dash": "dot", "color": "#b00020"})
        label = f"{event['action']} {event.get('target', '')} {event['phase']}"
        fig.add_annotation(x=when, yref="paper", y=1.02, text=label, showarrow=False, font={"size": 10})
    names = (
        {"sender": ("requester", "requests sent, total"), "receiver": ("replier", "requests served, total")}
        if closed
        else {"sender": ("sender", "sent, total"), "receiver": ("receiver", "received, total")}
    )
    for role, (label, total_name) in names.items():
        totals: dict[int, int] = {}
        for (r, peer), series in sorted(rates.items()):
            if r != role:
                continue
            seconds = sorted(series)
            fig.add_scatter(x=[_when(s) for s in seconds], y=[series[s] for s in seconds], name=f"{peer} ({label})")
            for second, count in series.items():
                totals[second] = totals.get(second, 0) + count
        if totals:
            seconds = sorted(totals)
            fig.add_scatter(
                x=[_when(s) for s in seconds], y=[totals[s] for s in seconds], name=total_name, line={"width": 3}
            )
    unit = "requests per second" if closed else "messages per second"
    return figure(fig, "Requests" if closed else "Throughput", unit)


def _latency_chart(latency: dict[int, dict[str, float]], title: str, uncertainty_ms: float = 0.0) -> str:
    fig = go.Figure()
    seconds = sorted(latency)
    # Corrected across hosts: the clock offsets' uncertainty is the error bar of every point.
    error = {"type": "constant", "value": uncertainty_ms, "visible": True} if uncertainty_ms else None
    for key in ("p50", "p75", "p90", "p95", "p99", "p99.9", "max"):
        fig.add_scatter(
            x=[_when(s) for s in seconds], y=[latency[s][key] / 1000 for s in seconds], name=key, error_y=error
        )
    return figure(fig, title, "milliseconds")


def _latency_charts(
    latency: dict[str, dict[int, dict[str, float]]],
    figures: TestFigures,
    untrusted: str | None,
    uncertainty_ms: float,
) -> list[str]:
    """Per second, corrected and service, and the whole test's distribution; none where the
    latency is no figure (clamped or uncorrectable values drawn as a curve would read as one)."""
    if untrusted:
        return [f"<p>No latency charts: {html.escape(untrusted)}.</p>"]
    charts = []
    if latency.get("corrected"):
        charts.append(
            _latency_chart(latency["corrected"], "Latency per second (from the intended send time)", uncertainty_ms)
        )
    if latency.get("service"):
        title = "Service latency per second (from the actual send time)"
        charts.append(_latency_chart(latency["service"], title, uncertainty_ms))
    return [*charts, _distribution_chart(figures)]


def _distribution_chart(figures: TestFigures) -> str:
    """From the summary's own histogram: the same warm-up cut as its percentiles."""
    if not figures.latency_samples:
        return ""
    curve = ("latency", figures.latency_distribution_us)
    return percentile_chart([curve], "Latency by percentile (whole test after warm-up, corrected)")


def build_report(
    spark: Any, test_dir: Path, baseline: Path | None = None, thresholds: Thresholds | None = None
) -> tuple[Path, Comparison | None]:
    """Write `<test_dir>/report/`; the folder, and the comparison with a baseline test folder if
    one is given (summary.json's `baseline`, the one key beyond DESIGN's list, only then)."""
    record = read_test_record(test_dir) or TestRecord(test_dir.name)
    if record.steps:
        return build_series_report(test_dir, record), None  # its phases have reports of their own
    peers = read_peers(test_dir)
    figures = judged(summarize(test_dir, peers, record), record)
    summary = figures.summary_json(record.outcome, record.reason)
    comparison = None
    if baseline is not None:
        base_record = read_test_record(baseline) or TestRecord(baseline.name)
        base_figures = judged(summarize(baseline, record=base_record), base_record)
        base = Judged(base_figures, base_record.outcome, base_record.reason)
        comparison = compare(Judged(figures, record.outcome, record.reason), base, thresholds or Thresholds())
        summary["baseline"] = comparison.to_json()
    corrections = clock_corrections(record.peers or ())
    series = report_series(spark, peers, corrections)
    rates, rows = series.rates, series.rows
    latency = {"corrected": series.corrected, "service": latency_series(peers, corrections, "service")}
    out = test_dir / "report"
    out.mkdir(exist_ok=True)
    shutil.copyfile(PLOTLY_JS, out / "plotly.min.js")
    write_summary_json(out, summary)
    outcome = record.outcome or "unknown"
    untrusted = figures.latency_untrusted
    leg = "request leg" if figures.request_reply is not None else "latency"  # a closed system's is one leg
    key_figures = [
        {"figure": "sent", "value": figures.sent},
        {"figure": "received", "value": figures.received},
        {"figure": "lost", "value": figures.lost},
        {"figure": "duplicates", "value": figures.duplicates},
        {"figure": "send rate, mean msg/s", "value": _or_none(figures.send_rate.of(figures.sent))},
        {"figure": "receive rate, mean msg/s", "value": _or_none(figures.receive_rate.of(figures.received))},
        *_megabytes(figures, record.message_size),
        *_response_time_rows(figures.request_reply),
        *(
            [{"figure": leg, "value": f"no figure: {untrusted}"}]
            if untrusted
            else [{"figure": leg, "value": "none: no message arrived after the warm-up"}]
            if not figures.latency_samples
            else ({"figure": f"{leg} {k}, ms", "value": v / 1000} for k, v in figures.latency_us.items())
        ),
        {"figure": "duration, s", "value": figures.duration_s},
        *price_performance(figures.receive_rate.mean, record.labels),
    ]
    verdict = _baseline_section(comparison)
    events = record.events or ()
    windows = windows_from_events(events)
    # Two more Spark passes over the rate files: only for a test that had faults to measure.
    faults = fault_effects(windows, spark_gather(spark, peers), peer_events(peers)) if windows else []
    if faults:
        (out / "faults.json").write_text(json.dumps(faults, indent=2))
    closed = figures.request_reply is not None
    charts = [_rate_chart(rates, events, record.control_outages or (), closed)]
    corrected = [p for p in figures.peers if p.latency_correction_us is not None]
    uncertainty_ms = max((p.latency_uncertainty_us or 0.0 for p in corrected), default=0.0) / 1000
    charts += _latency_charts(latency, figures, untrusted, uncertainty_ms)
    # The test's own queues and topics first; the rest of the broker's behind the legend.
    destinations = {d for row in figures.per_sender if (d := destination_of(row.sut))}
    charts += inspector_panels(inspector_tables(test_dir), destinations)
    peer_rows = (
        [{**p.to_json(), "clock offset ms": _offset(p.clock)} for p in record.peers]
        if record.peers is not None
        else [{"name": p.name, "role": p.role, "host": p.host, "clock offset ms": ""} for p in figures.peers]
    )
    reason = f"<p>Reason: {html.escape(record.reason)}</p>" if record.reason else ""
    # What was tested, stated before any figure (the coordinator's line: test.json `workload`).
    if record.workload:
        reason += f'<p class="workload">Workload: {html.escape(record.workload)}</p>'
    if untrusted and untrusted != record.reason:
        reason += f'<p class="failure">Latency: {html.escape(untrusted)}</p>'
    reason += "".join(f'<p class="failure">Generator-bound: {html.escape(why)}</p>' for why in generator_bound(peers))
    reason += "".join(f'<p class="failure">Inspector: {html.escape(why)}</p>' for why in inspector_shortfalls(peers))
    reason += "".join(f'<p class="hint">Hint: {html.escape(hint)}</p>' for hint in figures.hints_all)
    reason += "".join(
        f"<p>Latency at {html.escape(p.name)} corrected across hosts by the measured clock offsets: "
        f"{(p.latency_correction_us or 0.0) / 1000:+.3f} ms ± {(p.latency_uncertainty_us or 0.0) / 1000:.3f} ms.</p>"
        for p in corrected
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(test_dir.name)}</title>
{ERRORS_JS}<script src="plotly.min.js"></script><style>{STYLE}</style></head><body>
<h1>Test {html.escape(test_dir.name)}: <span class="{html.escape(outcome)}">{html.escape(outcome)}</span></h1>
{reason}<p>{html.escape(record.name)} {html.escape(record.kind)}
started {html.escape(record.started or "")}; {rows:,} rate records read.
Rates and latency leave the warm-up out; counts cover the whole test.</p>
{previous_link(test_dir.name, record)}
<p class="load-model">Load model: {_LOAD_MODELS[figures.load_model]}</p>
{table(key_figures, ["figure", "value"])}
{_request_reply_section(figures.request_reply)}
{verdict}
{"".join(c for c in charts if c)}
{_faults_section(faults)}
<h2>Loss and duplicates per sender</h2>
{table([row.to_json() for row in figures.per_sender], _LOSS_COLUMNS)}
<p>{_LOSS_LEGEND}</p>
{_sut_counters_section(figures.accounting.sut_counters)}
<h2>Peers</h2>
{table(peer_rows, ["name", "role", "host", "clock offset ms"])}
{_client_settings_section(peers)}
</body></html>"""
    (out / "index.html").write_text(page)
    return out, comparison


_LOSS_COLUMNS = [
    "sender",
    "intended",
    "expected",
    "accepted",
    "received",
    "lost",
    "lost_percent",
    "duplicates",
    "out_of_order",
]
_LOSS_LEGEND = (
    "Intended: what the sender's schedule meant to send. Expected: what it handed to its client library. "
    "Accepted: what the SUT acknowledged (blank where the driver's settings acknowledge nothing: at most "
    "once). Received: distinct sequence numbers."
)


def _client_settings_section(peers: Peers) -> str:
    """Each worker's client library and the settings it ran with, as it recorded them; one
    table for workers that ran alike (a test's senders, say)."""
    alike: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for _, peer in peers:
        if peer.client_settings:
            alike.setdefault(tuple(peer.client_settings.items()), []).append(f"{peer.role} {peer.name}")
    if not alike:
        return ""
    tables = "".join(
        f"<h3>{html.escape(', '.join(names))}</h3>"
        + table([{"setting": k, "value": v} for k, v in settings], ["setting", "value"])
        for settings, names in alike.items()
    )
    return f'<h2>Client settings</h2><div class="client-settings">{tables}</div>'


def _or_none(rate: float | None) -> float | str:
    return "none: no message after the warm-up" if rate is None else rate


def _megabytes(figures: TestFigures, size: object) -> list[Row]:
    """The mean rates in MB/s (10^6 B) beside msg/s, where the message size is known (a range
    of sizes by its mean)."""
    measured = {"send": figures.send_rate.of(figures.sent), "receive": figures.receive_rate.of(figures.received)}
    rates = {side: megabytes_per_s(rate, size) for side, rate in measured.items() if rate is not None}
    return [
        {"figure": f"{side} rate, mean MB/s", "value": round(mb, 3)} for side, mb in rates.items() if mb is not None
    ]


def _sut_counters_section(counters: Sequence[SutCounters]) -> str:
    """The SUT's own counts of the queues and topics the senders sent to, as an inspector read
    them: a table per kind of SUT, each with what its figures mean."""
    tables = "".join(
        table(rows, columns) + f"<p>{html.escape(legend)}</p>"
        for source, (columns, legend) in _SUT_COUNTERS.items()
        if (rows := [row for c in counters if (row := c.to_json())["source"] == source])
    )
    return f"<h3>The SUT's own counters</h3>{tables}" if tables else ""


_SUT_COUNTERS = {
    "rabbitmq": (
        ["source", "queue", "from", "at", "published", "delivered", "left_before", "left", "dropped", "caught_up"],
        "RabbitMQ's queue counters as the inspector read them before the senders started (from; none for a queue "
        "the test made) and last (at; RabbitMQ refreshes them every 5 s), the first reading taken off: published, "
        "delivered for the first time, left in the queue before and after, and dropped = published - delivered - "
        "(left - left before). Caught up: "
        "the reading had counted every message our senders sent and our receivers got; one that had not is "
        "shown, never cited.",
    ),
    "kafka": (
        ["source", "topic", "partitions", "from", "at", "took", "kept", "deleted", "caught_up"],
        "Kafka's watermarks as the inspector read them before the senders started (from) and last (at): took = "
        "how far the high watermark moved, kept = of those, still above the low watermark, deleted = those the "
        "low watermark moved past (retention, DeleteRecords), read or not. Caught up: the topic took at least "
        "what it acknowledged; a first reading taken late, or a broker that numbers batches rather than records, "
        "shows fewer, and is shown, never cited.",
    ),
    "router": (
        [
            "source",
            "address",
            "at",
            "took",
            "accepted",
            "released",
            "modified",
            "unsettled",
            "delivered",
            "links_out",
            "consumers_accepted",
            "dropped",
            "caught_up",
        ],
        "A Qpid Dispatch Router's counts of the address as the inspector read its links (a link's counters live as "
        "long as the link): took = what came in from the senders, accepted, released and modified = what it "
        "answered them (unsettled: no answer yet at the link's last reading), delivered = what went out to its "
        "links_out consumer links, consumers_accepted = what they accepted, dropped = what it acknowledged beyond "
        "that. Caught up: the router took at least what it acknowledged and delivered at least what our receivers "
        "got; a reading from before is shown, never cited.",
    ),
}


_FAULT_COLUMNS = [
    "agent",
    "fault",
    "start_s",
    "end_s",
    "outage_s",
    "first_publish_after_s",
    "first_consume_after_s",
    "back_to_95_percent_s",
    "p99_before_ms",
    "p99_during_ms",
    "p99_after_ms",
    "lost",
    "duplicates",
    "disconnects",
    "reconnects",
    "error",
]


_LOAD_MODELS = {
    "open": "open (senders on a schedule: fixed rate or as fast as the SUT takes)",
    "closed": "closed (request/reply: clients wait for each reply, then think)",
}


# A request/reply time's columns as the latency table's: p99.9 too (it was left out).
_TIME_COLUMNS = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p999"), ("max", "max"), ("mean", "mean"))


def _request_reply_section(rr: RequestReplyFigures | None) -> str:
    """A closed system's figures: its counts, the response time and its legs, Little's law."""
    if rr is None:
        return ""
    law = rr.littles_law
    counts: list[Row] = [
        {"figure": name.replace("_", " "), "value": getattr(rr, name)}
        for name in ("requests", "replies", "timed_out", "late", "duplicates")
    ]
    counts.append({"figure": "throughput, requests/s", "value": rr.throughput_per_s})
    counts.append({"figure": "think time planned, ms", "value": rr.think_time_mean_s * 1000})
    counts.append({"figure": "think time lived, ms", "value": rr.think_time_measured_s * 1000})
    legs = [
        # A time with no sample is none, not 0 ms (a test with no reply in time has no response time).
        {"time": label, **{c: getattr(times, k) / 1000 for c, k in _TIME_COLUMNS}}
        if (times := getattr(rr, key)).samples
        else {"time": label, "p50": "none: no sample"}
        for label, key in (
            ("response (intended → reply)", "response_time_us"),
            ("request leg", "request_leg_us"),
            ("replier", "replier_us"),
            ("reply leg", "reply_leg_us"),
        )
    ]
    spread = rr.legs_uncertainty_us
    littles_law = (
        f"<p>Little's law: {law.clients:g} clients waiting or thinking; throughput x (response + think as lived)"
        f" = {law.throughput_x_time:.2f} ({law.deviation_percent:+.1f} %).</p>"
        if rr.response_time_us.samples
        else "<p>Little's law: not checked, with no response time to check it by.</p>"
    )
    return (
        "<h2>Request/reply</h2>"
        + table(counts, ["figure", "value"])
        + "<p>Milliseconds; the legs corrected by the clocks measured for requester and replier"
        + (f", ± {spread / 1000:.3f} ms" if spread else " (one host, one clock)")
        + ".</p>"
        + table(legs, ["time", *(c for c, _ in _TIME_COLUMNS)])
        + littles_law
    )


def _response_time_rows(rr: RequestReplyFigures | None) -> list[Row]:
    """A closed system's headline: its response time (intended send to reply), before its legs."""
    if rr is None:
        return []
    times = rr.response_time_us
    if not times.samples:
        return [{"figure": "response time", "value": "none: no reply came in time"}]
    return [
        {"figure": f"response time {column}, ms", "value": getattr(times, key) / 1000}
        for column, key in _TIME_COLUMNS
        if key != "mean"
    ]


def _faults_section(faults: list[JsonObject]) -> str:
    if not faults:
        return ""
    return (
        '<h2 id="faults">Faults and their effect</h2><p>Seconds from the start of the test. Outage: the longest '
        "pause in arrivals around the fault; first publish/consume and back to 95 % of the rate before: seconds "
        "after the fault ended; p99 latency from the intended send time, in the 10 s before, during the fault "
        "(and its outage), and in the 10 s after; lost: messages intended to be sent in that span that never "
        "arrived.</p>" + table(faults, _FAULT_COLUMNS)
    )


def _baseline_section(comparison: Comparison | None) -> str:
    if comparison is None:
        return ""
    verdict = comparison.verdict
    css = "success" if verdict == "pass" else "failure"
    if verdict == "invalid":
        head = f'<h2>Against baseline {html.escape(comparison.test_id)}: <span class="{css}">not compared</span></h2>'
        return head + f'<p class="failure">{html.escape(comparison.reason or "")}</p>'
    rows = [
        {
            "figure": name,
            "baseline": c.baseline,
            "current": c.current,
            "change": f"{100 * c.change:+.2f} %",
            "allowed": f"{100 * c.threshold:.2f} %",
            "regression": "REGRESSION" if c.regression else "ok",
        }
        for name, c in comparison.changes.items()
    ]
    return f'<h2>Against baseline {html.escape(comparison.test_id)}: <span class="{css}">{verdict}</span></h2>' + table(
        rows, ["figure", "baseline", "current", "change", "allowed", "regression"]
    )


def _offset(clock: PeerClock) -> str:
    """The offset measured before the load, its ±, and how (udp: directly; mqtt: through the
    control broker)."""
    before = clock.estimate("before")
    if before is None:
        return ""
    how = f" ({before.path})" if before.path else ""
    return f"{before.offset_us / 1000:+.3f} ± {before.uncertainty_us / 1000:.3f}{how}"


_Cells = tuple[object, object, object, float | None]


def _read_summary(path: Path) -> TestFigures | None:
    """A report's summary.json, or None where there is none or it is no summary (the index then
    shows the figures test.json holds)."""
    try:
        return read_summary_json(path)
    except ValueError as exc:
        if path.exists():
            log.warning("%s: not a summary (%s); the index shows test.json's figures", path, exc)
        return None


def _cells(figures: TestFigures | None, *, counts_samples: bool) -> _Cells:
    """Sent, lost, the mean receive rate and the p99 in ms: none where there are no figures, and
    no p99 where the latency is no figure, or has no sample where the figures count them
    (test.json's do; summary.json's do not, and hold a null latency where it is no figure)."""
    if figures is None or figures.error is not None:
        return None, None, None, None
    if (rr := figures.request_reply) is not None:  # a closed system's p99 is its response time's
        p99 = rr.response_time_us.p99 / 1000 if rr.replies else None
        return figures.sent, figures.lost, figures.receive_rate.of(figures.received), p99
    no_latency = figures.latency_untrusted or (counts_samples and not figures.latency_samples)
    return (
        figures.sent,
        figures.lost,
        figures.receive_rate.of(figures.received),
        None if no_latency else figures.latency_us.p99 / 1000,
    )


def build_index(root: Path) -> Path:
    """`<root>/index.html` (`index_page`)."""
    (root / "index.html").write_text(index_page(root))
    return root / "index.html"


def index_page(root: Path) -> str:
    """Every test with its key figures, newest first, sortable. A test without a report yet
    shows the figures its test.json holds and links to that file; a test's name links to its
    history (the data server's /history/NAME). A figure a test does not have (an untrusted
    latency) is an empty cell, never 0."""
    rows = []
    folders = sorted(result_dirs(root), reverse=True)
    records = {test_dir.name: read_test_record(test_dir) or TestRecord(test_dir.name) for test_dir in folders}
    previous = previous_runs(records.values())
    for test_dir in folders:
        summary_path = test_dir / "report" / "summary.json"
        record = records[test_dir.name]
        summary = _read_summary(summary_path)
        figures = (
            _cells(summary, counts_samples=False)
            if summary is not None
            else _cells(record.summary, counts_samples=True)
        )
        own = html.escape(test_dir.name)
        target = f"{own}/report/index.html" if summary_path.exists() else f"{own}/test.json"
        name = record.name
        history = (
            f'<a href="history/{html.escape(urllib.parse.quote(str(name), safe=""))}">{html.escape(str(name))}</a>'
            if name
            else ""
        )
        outcome = html.escape(cell(record.outcome))
        reason = html.escape(record.reason or "", quote=True)
        rows.append(
            "<tr>"
            + f'<td><a href="{target}">{own}</a></td><td>{history}</td>'
            + f"<td>{index_cell(test_dir.name, previous.get(test_dir.name))}</td>"
            + "".join(f"<td>{html.escape(cell(v))}</td>" for v in (record.kind or None, record.started))
            + f'<td title="{reason}">{outcome}</td>'
            + "".join(f"<td>{html.escape(cell(v))}</td>" for v in figures)
            + "</tr>"
        )
    head = "".join(
        f"<th onclick='sortBy({i})'>{h}</th>"
        for i, h in enumerate(
            [
                "test",
                "name (history)",
                "compare",
                "kind",
                "started",
                "outcome",
                "sent",
                "lost",
                "receive msg/s",
                "p99 ms",
            ]
        )
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Maestro results</title>
{ERRORS_JS}<style>{STYLE}</style></head><body><h1>Maestro results</h1>
{PICKED_JS}
<table id="tests"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>
<script>
function sortBy(col) {{
  const body = document.querySelector('#tests tbody');
  const rows = Array.from(body.rows);
  const num = t => parseFloat(t.replace(/,/g, ''));
  const key = r => r.cells[col].textContent;
  const asc = body.dataset.col == col && body.dataset.dir != 'asc';
  rows.sort((a, b) => {{
    const x = key(a), y = key(b);
    const c = isNaN(num(x)) || isNaN(num(y)) ? x.localeCompare(y) : num(x) - num(y);
    return asc ? c : -c;
  }});
  body.dataset.col = col; body.dataset.dir = asc ? 'asc' : 'desc';
  rows.forEach(r => body.appendChild(r));
}}
</script></body></html>"""
    return page

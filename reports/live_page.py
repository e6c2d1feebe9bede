"""The live page of a running test: its workload, throughput and latency (ms) per second and the peers' state,
updated by server-sent events (reports/live.py), drawn with the offline Plotly bundle the reports
ship. When the test ends it turns into the test's report, which the data server builds when asked
(and shows "building" until then).

The page keeps what it drew on its root element (data-points, data-first-points, data-updates,
data-state), where a headless browser test reads it.
"""

from __future__ import annotations

import html
import json

from protocol.live import LiveUpdate
from reports.page import ERRORS_JS, STYLE

__all__ = ["live_page"]

_SCRIPT = """
const testId = %(test_id)s;
const root = document.documentElement;
const cell = v => v === undefined || v === null ? '' :
  (typeof v === 'number' ? v.toLocaleString('en', {maximumFractionDigits: 1}) : String(v));
const layout = (title, y) => ({title: {text: title}, height: 340, margin: {l: 70, r: 20, t: 40, b: 50},
  xaxis: {title: {text: 'elapsed (s)'}}, yaxis: {title: {text: y}, rangemode: 'tozero'}});
let drawn = 0;
let last = {};  // the newest point: the rates now
// A closed system (request/reply) is read by its response time, not by a leg of it.
let closed = false;
const latencyKeys = () => closed ? ['response_p50_us', 'response_p99_us'] : ['latency_p50_us', 'latency_p99_us'];

function columns(points, key) { return points.map(p => p[key]); }
// People read ms; the updates' keys keep their µs.
const ms = v => v === undefined || v === null ? null : v / 1000;
function millis(points, key) { return points.map(p => ms(p[key])); }
// The peer table: [key, heading, to the unit shown].
// A column no peer has a value for is left out (a requester's on a fixed-rate test, and so on).
const PEER_COLUMNS = [['name', 'peer'], ['role', 'role'], ['host', 'host'], ['state', 'state'],
  ['sent', 'sent'], ['received', 'received'], ['replies', 'replies'], ['timed_out', 'timed out'],
  ['errors', 'errors'], ['missing', 'lost so far'], ['duplicates', 'duplicates'],
  ['response_p50_us', 'response p50 ms', ms], ['response_p99_us', 'response p99 ms', ms],
  // A replier's latency is the request's leg to it, not the response time: named so.
  ['latency_p50_us', 'latency p50 ms', ms, 'request leg p50 ms'],
  ['latency_p99_us', 'latency p99 ms', ms, 'request leg p99 ms'],
  ['lag_p99_us', 'send lag p99 ms', ms], ['cpu_percent', 'CPU %%'], ['loop_lag_ms', 'loop lag ms']];
const ALWAYS = new Set(['name', 'role', 'host', 'state']);

function draw(points) {
  const x = columns(points, 'elapsed_s');
  Plotly.newPlot('throughput', [
    {x, y: columns(points, 'send_rate'), name: 'sent', mode: 'lines'},
    {x, y: columns(points, 'receive_rate'), name: 'received', mode: 'lines'}],
    layout('Throughput', 'msg/s'), {responsive: true});
  const [p50, p99] = latencyKeys();
  Plotly.newPlot('latency', [
    {x, y: millis(points, p50), name: 'p50', mode: 'lines'},
    {x, y: millis(points, p99), name: 'p99', mode: 'lines'}],
    layout(closed ? 'Response time, worst requester, per second' : 'Latency, worst receiver, per second', 'ms'),
    {responsive: true});
  drawn = points.length;
  if (drawn) last = points[drawn - 1];
  root.dataset.firstPoints = drawn;
  root.dataset.points = drawn;
}

function extend(points) {
  if (!points.length) return;
  const x = columns(points, 'elapsed_s');
  Plotly.extendTraces('throughput', {x: [x, x], y: [columns(points, 'send_rate'), columns(points, 'receive_rate')]},
    [0, 1]);
  const [p50, p99] = latencyKeys();
  Plotly.extendTraces('latency', {x: [x, x], y: [millis(points, p50), millis(points, p99)]}, [0, 1]);
  drawn += points.length;
  last = points[points.length - 1];
  root.dataset.points = drawn;
}

// Totals so far, and the rates now in msg/s and MB/s (10^6 B).
function totals(update) {
  const sum = (role, key) => update.peers.filter(p => !role || p.role === role)
    .reduce((a, p) => a + (typeof p[key] === 'number' ? p[key] : 0), 0);
  const errors = update.peers.reduce((a, p) => a + Object.values(p.errors || {}).reduce((x, y) => x + y, 0), 0);
  const rate = v => {
    if (typeof v !== 'number') return '-';
    const mb = update.size_bytes ?
      ` (${(v * update.size_bytes / 1e6).toLocaleString('en', {maximumSignificantDigits: 3})} MB/s)` : '';
    return `${cell(v)} msg/s${mb}`;
  };
  if (closed) {
    return `requests ${cell(sum('sender', 'sent'))}, replies ${cell(sum('sender', 'replies'))}, ` +
      `timed out ${cell(sum('sender', 'timed_out'))}, errors ${cell(errors)}; now ${rate(last.send_rate)} requested`;
  }
  return `sent ${cell(sum('sender', 'sent'))}, received ${cell(sum('receiver', 'received'))}, ` +
    `lost so far ${cell(sum(null, 'missing'))}, duplicates ${cell(sum(null, 'duplicates'))}, errors ${cell(errors)}; ` +
    `now sending ${rate(last.send_rate)}, receiving ${rate(last.receive_rate)}`;
}

function show(update) {
  root.dataset.state = update.state;
  const total = update.expected_s ? ` of ${Math.round(update.expected_s)} s` : '';
  document.getElementById('status').textContent =
    `${update.state}: ${Math.round(update.elapsed_s)} s${total}` +
    (update.outcome ? ` (${update.outcome}${update.reason ? ': ' + update.reason : ''})` : '');
  document.getElementById('workload').textContent = update.workload ? `Workload: ${update.workload}` : '';
  document.getElementById('totals').textContent = totals(update);
  // As it happens: a sender at its limit measures itself (reports.summary says so after the test).
  document.getElementById('bound').textContent =
    (update.generator_bound || []).map(why => `Generator-bound: ${why}`).join('; ');
  document.getElementById('stop').hidden = update.state !== 'running';
  const shown = PEER_COLUMNS.filter(([k]) => ALWAYS.has(k) || update.peers.some(p => p[k] !== undefined));
  const rows = update.peers.map(p => '<tr>' + shown.map(([k, , unit]) => {
    let v = k === 'errors' && p.errors ? Object.values(p.errors).reduce((a, b) => a + b, 0) : p[k];
    if (unit) v = unit(v);
    return `<td>${cell(v).replace(/</g, '&lt;')}</td>`;
  }).join('') + '</tr>');
  const heading = ([, h, , inClosed]) => `<th>${closed && inClosed ? inClosed : h}</th>`;
  document.getElementById('peers').innerHTML = '<thead><tr>' + shown.map(heading).join('')
    + '</tr></thead><tbody>' + rows.join('') + '</tbody>';
}

// The stop button: the data server passes the stop to the test's coordinator, which stops the
// test as Ctrl-C would. A server with a token wants it (asked for, never kept).
async function askStop() {
  if (!confirm('Stop this test? Its coordinator stops it as Ctrl-C would, and collects its files.')) return;
  const button = document.getElementById('stop');
  let headers = {'Content-Type': 'application/json'};
  for (;;) {
    const answer = await fetch(`/api/live/${encodeURIComponent(testId)}/stop`, {method: 'POST', headers});
    if (answer.status === 401) {
      const token = prompt("This data server's token (the coordinator's --token-file holds it)");
      if (!token) return;
      headers = {...headers, Authorization: `Bearer ${token.trim()}`};
      continue;
    }
    button.textContent = answer.ok ? 'stop asked' : `not stopped (${answer.status})`;
    button.disabled = answer.ok;
    return;
  }
}

function finish() {
  document.getElementById('status').textContent += ' - opening the report';
  setTimeout(() => location.replace(`/results/${encodeURIComponent(testId)}/report/index.html`), 1000);
}

async function start() {
  const answer = await fetch(`/api/live/${encodeURIComponent(testId)}`);
  if (answer.status === 404) {
    const done = await fetch(`/api/results/${encodeURIComponent(testId)}`);
    const record = done.ok ? (await done.json()).test : {};
    if (record && record.outcome) { finish(); return; }
    document.getElementById('status').textContent = 'waiting for the test to start';
    setTimeout(start, 1000);
    return;
  }
  const state = await answer.json();
  closed = state.kind === 'request-reply';
  draw(state.points);
  show(state);
  if (state.state === 'finished') { finish(); return; }
  const events = new EventSource(`/api/live/${encodeURIComponent(testId)}/events?since=${drawn}`);
  events.onmessage = event => {
    const update = JSON.parse(event.data);
    root.dataset.updates = Number(root.dataset.updates || 0) + 1;
    extend(update.points);
    show(update);
    if (update.state === 'finished') { events.close(); finish(); }
  };
}
start();
"""


# A request/reply test's 18 columns, each heading on one line, made the table 1,324 px wide in a
# 1,280 px window: headings wrap instead, and the figures keep to one line.
_PEERS_STYLE = (
    "#peers{font-size:.9em}#peers td,#peers th{padding:3px 6px}"
    "#peers th{white-space:normal;max-width:6em}#peers td{white-space:nowrap}"
)


def live_page(test_id: str, update: LiveUpdate | None = None) -> str:
    """The page, with what was tested and where it stands as of `update` (the last post) in its
    HTML: the first screen says it before the event stream connects."""
    title = html.escape(f"Live: {test_id}")
    script = _SCRIPT % {"test_id": json.dumps(test_id).replace("</", "<\\/")}
    workload = f"Workload: {update.workload}" if update is not None and update.workload else ""
    status = "connecting"
    if update is not None:
        total = f" of {round(update.expected_s)} s" if update.expected_s else ""
        status = f"{update.state}: {round(update.elapsed_s)} s{total}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
{ERRORS_JS}<script src="/assets/plotly.min.js"></script><style>{STYLE}{_PEERS_STYLE}</style></head><body>
<h1>{title}</h1>
<p id="workload">{html.escape(workload)}</p>
<p id="status">{html.escape(status)}</p>
<button id="stop" type="button" hidden onclick="askStop()">Stop the test</button>
<p id="totals"></p>
<p id="bound" class="failure"></p>
<div id="throughput"></div>
<div id="latency"></div>
<h2>Peers</h2>
<table id="peers"></table>
<script>{script}</script>
</body></html>
"""

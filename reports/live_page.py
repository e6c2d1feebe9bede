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

function columns(points, key) { return points.map(p => p[key]); }
// People read ms; the updates' keys keep their µs.
const ms = v => v === undefined || v === null ? null : v / 1000;
function millis(points, key) { return points.map(p => ms(p[key])); }
// The peer table: [key, heading, to the unit shown].
const PEER_COLUMNS = [['name', 'peer'], ['role', 'role'], ['host', 'host'], ['state', 'state'],
  ['sent', 'sent'], ['received', 'received'], ['errors', 'errors'], ['missing', 'lost so far'],
  ['duplicates', 'duplicates'], ['latency_p50_us', 'latency p50 ms', ms], ['latency_p99_us', 'latency p99 ms', ms],
  ['lag_p99_us', 'send lag p99 ms', ms], ['cpu_percent', 'CPU %%']];

function draw(points) {
  const x = columns(points, 'elapsed_s');
  Plotly.newPlot('throughput', [
    {x, y: columns(points, 'send_rate'), name: 'sent', mode: 'lines'},
    {x, y: columns(points, 'receive_rate'), name: 'received', mode: 'lines'}],
    layout('Throughput', 'msg/s'), {responsive: true});
  Plotly.newPlot('latency', [
    {x, y: millis(points, 'latency_p50_us'), name: 'p50', mode: 'lines'},
    {x, y: millis(points, 'latency_p99_us'), name: 'p99', mode: 'lines'}],
    layout('Latency, worst receiver, per second', 'ms'), {responsive: true});
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
  Plotly.extendTraces('latency', {x: [x, x], y: [millis(points, 'latency_p50_us'), millis(points, 'latency_p99_us')]},
    [0, 1]);
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
  document.getElementById('stop').hidden = update.state !== 'running';
  const rows = update.peers.map(p => '<tr>' + PEER_COLUMNS.map(([k, , unit]) => {
    let v = k === 'errors' && p.errors ? Object.values(p.errors).reduce((a, b) => a + b, 0) : p[k];
    if (unit) v = unit(v);
    return `<td>${cell(v).replace(/</g, '&lt;')}</td>`;
  }).join('') + '</tr>');
  document.getElementById('peers').innerHTML = '<thead><tr>' + PEER_COLUMNS.map(([, h]) => `<th>${h}</th>`).join('')
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


def live_page(test_id: str) -> str:
    title = html.escape(f"Live: {test_id}")
    script = _SCRIPT % {"test_id": json.dumps(test_id).replace("</", "<\\/")}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
{ERRORS_JS}<script src="/assets/plotly.min.js"></script><style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p id="status">connecting</p>
<button id="stop" type="button" hidden onclick="askStop()">Stop the test</button>
<p id="workload"></p>
<p id="totals"></p>
<div id="throughput"></div>
<div id="latency"></div>
<h2>Peers</h2>
<table id="peers"></table>
<script>{script}</script>
</body></html>
"""

"""A test's history where a team already looks (#39): Apache Otava's CSV, Bencher's metric format
(BMF), github-action-benchmark's custom JSON, and a webhook on a regression or an invalid run.

What is exported is what the gate counts, never more: Otava gets the comparable runs (the same
workload and testbed as the newest; no failed, invalid or generator-bound run), each with the
figures it has; Bencher and github-action-benchmark take one run per upload, the newest, and
refuse it when it did not measure the SUT (`NotExportableError`), as a figure that cannot be trusted
is not sent on as one. A figure a run does not have (an untrusted latency) is left out, not 0.

Units as each tool expects them: Bencher's built-in `latency` measure is in nanoseconds and
`throughput` in operations per second, so latency goes out in ns there; Otava and
github-action-benchmark carry the unit in the name or alongside.
"""

from __future__ import annotations

import csv
import io
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime

from protocol.json_value import JsonObject
from reports.history import FIGURES, History, Run
from reports.verdict import GateVerdict, Verdict, not_measured

__all__ = [
    "EXPORTS",
    "NotExportableError",
    "bencher_bmf",
    "github_benchmark",
    "otava_csv",
    "post_webhook",
    "webhook_body",
]

# Bencher: (measure slug, factor from our unit). Latency µs -> ns for the built-in measure.
_BENCHER = {
    "receive_rate": ("throughput", 1.0),
    "latency_p50_us": ("latency", 1000.0),
    "latency_p99_us": ("latency", 1000.0),
    "latency_p999_us": ("latency", 1000.0),
    "loss_ratio": ("loss-ratio", 1.0),
    "duplicate_ratio": ("duplicate-ratio", 1.0),
}
_WEBHOOK_ATTEMPTS = 3


class NotExportableError(Exception):
    """The run asked for cannot be exported as a measurement of the SUT; says why."""


def otava_csv(history: History) -> str:
    """Otava's CSV (`type: csv`, `time_column: time`, `attributes: [test_id]`, the figures'
    keys as `metrics`): one row per comparable run, oldest first, an empty cell where a run
    lacks a figure."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["time", "test_id", *(f.key for f in FIGURES)])
    for run in history.runs:
        if history.left_out(run) is None:
            figures = [_cell(run.figures.get(f.key)) for f in FIGURES]
            writer.writerow([_otava_time(run.started), run.test_id, *figures])
    return out.getvalue()


def bencher_bmf(history: History) -> str:
    """Bencher Metric Format for the newest run: a benchmark per figure, named after the test,
    under its measure (`throughput`, `latency` in ns, `loss-ratio`, `duplicate-ratio`)."""
    run = _newest_measured(history)
    bmf: dict[str, dict[str, dict[str, float]]] = {}
    for fig in FIGURES:
        value = run.figures.get(fig.key)
        if value is not None:
            measure, factor = _BENCHER[fig.key]
            bmf[f"{history.name}: {fig.title}"] = {measure: {"value": value * factor}}
    return json.dumps(bmf, indent=2) + "\n"


def github_benchmark(history: History, bigger_is_better: bool) -> str:
    """github-action-benchmark's `customBiggerIsBetter` (the receive rate) or
    `customSmallerIsBetter` (latencies, loss, duplicates) JSON for the newest run."""
    run = _newest_measured(history)
    benches = [
        {
            "name": f"{history.name}: {fig.title}",
            "unit": fig.unit,
            "value": fig.shown(value),  # its chart is read by people: ms, as the history page's
            "extra": f"test id {run.test_id}",
        }
        for fig in FIGURES
        if fig.higher_is_better == bigger_is_better and (value := run.figures.get(fig.key)) is not None
    ]
    return json.dumps(benches, indent=2) + "\n"


# Format name -> what it writes, for `maestro history --export FORMAT:PATH`.
EXPORTS: dict[str, Callable[[History], str]] = {
    "otava": otava_csv,
    "bencher": bencher_bmf,
    "github-bigger": lambda history: github_benchmark(history, bigger_is_better=True),
    "github-smaller": lambda history: github_benchmark(history, bigger_is_better=False),
}


def _newest_measured(history: History) -> Run:
    run = history.newest
    if run is None:
        raise NotExportableError(f"no finished run of {history.name!r}")
    if run.excluded:
        raise NotExportableError(f"the newest run {run.test_id} {not_measured(run)}; it did not measure the SUT")
    return run


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def _otava_time(started: str) -> str:
    """test.json's start (ISO 8601) as Otava's examples write time: `2024-01-01 02:00:00 +0000`."""
    try:
        moment = datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return started
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000")


def webhook_body(
    history: History, verdict: GateVerdict, *, slack: bool = False, report_url: str | None = None
) -> JsonObject | None:
    """What a webhook is sent for this verdict, or None: only a regression, or a newest run
    that is invalid, is news worth a message."""
    newest = history.newest
    invalid = newest is not None and newest.outcome == "invalid"
    if verdict.verdict is not Verdict.REGRESSION and not invalid:
        return None
    what = "INVALID" if invalid and verdict.verdict is not Verdict.REGRESSION else verdict.verdict.value
    body: JsonObject = {
        "test": history.name,
        "event": what,
        "verdict": verdict.verdict.value,
        "why": verdict.why,
        "findings": verdict.findings,
        "test_id": None if newest is None else newest.test_id,
        "outcome": None if newest is None else newest.outcome,
        "report": report_url,
    }
    if slack:
        where = f" <{report_url}|report>" if report_url else ""
        return {"text": f"*maestro* {history.name}: *{what}*: {verdict.why}{where}"}
    return body


def post_webhook(url: str, body: JsonObject, timeout_s: float = 10.0) -> str | None:
    """POST `body` as JSON to `url`, tried three times a second apart; None once it is taken
    (2xx), else why not (the URL is not said: it may carry a token)."""
    data = json.dumps(body).encode()
    why = ""
    for attempt in range(_WEBHOOK_ATTEMPTS):
        if attempt:
            time.sleep(1.0)
        request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                if 200 <= response.status < 300:
                    return None
                why = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code}"
            if 400 <= exc.code < 500 and exc.code != 429:
                break  # refused: asking again changes nothing
        except (urllib.error.URLError, OSError) as exc:
            why = str(getattr(exc, "reason", exc))
    return f"not taken after {attempt + 1} attempt(s): {why}"

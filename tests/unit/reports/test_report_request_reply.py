"""A closed system's figures in the report: the response time leads, and a time with no sample
is said to be none, never 0 ms."""

from __future__ import annotations

from protocol.figures import RequestReplyFigures, TimeFigures
from reports.report import _request_reply_section, _response_time_rows

ANSWERED = RequestReplyFigures(
    requests=40,
    replies=40,
    throughput_per_s=20.0,
    response_time_us=TimeFigures(
        p50=10_700.0, p90=12_000.0, p99=15_000.0, p999=15_800.0, max=16_000.0, mean=11_000.0, samples=40
    ),
    request_leg_us=TimeFigures(p50=2_400.0, samples=40),
    replier_us=TimeFigures(p50=5_100.0, samples=40),
    reply_leg_us=TimeFigures(p50=3_100.0, samples=40),
)


def test_the_response_time_leads_in_ms() -> None:
    rows = _response_time_rows(ANSWERED)
    assert [(r["figure"], r["value"]) for r in rows] == [
        ("response time p50, ms", 10.7),
        ("response time p90, ms", 12.0),
        ("response time p99, ms", 15.0),
        ("response time p99.9, ms", 15.8),
        ("response time max, ms", 16.0),
    ]
    section = _request_reply_section(ANSWERED)
    assert "<td>response (intended → reply)</td><td>10.7</td>" in section and "Little's law: 0 clients" in section
    # The legs' table has the latency table's p99.9 (it was left out), between p99 and max.
    assert "<th>p99</th><th>p99.9</th><th>max</th>" in section and "<td>15</td><td>15.8</td><td>16</td>" in section


def test_no_reply_in_time_is_no_response_time_not_0_ms() -> None:
    """Eight requests all timed out: the report read "0.000 ms" for every time and checked a
    Little's law of nothing."""
    unanswered = RequestReplyFigures(requests=8, timed_out=8, request_leg_us=TimeFigures(p50=2_000.0, samples=8))
    assert _response_time_rows(unanswered) == [{"figure": "response time", "value": "none: no reply came in time"}]
    section = _request_reply_section(unanswered)
    assert "<td>response (intended → reply)</td><td>none: no sample</td>" in section
    assert "<td>reply leg</td><td>none: no sample</td>" in section
    assert "<td>request leg</td><td>2</td>" in section  # the requests that did arrive have their leg
    assert "<td>0</td><td>0</td>" not in section.split("<td>request leg</td>")[0]
    assert "Little's law: not checked" in section
    assert _response_time_rows(None) == []

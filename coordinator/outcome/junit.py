"""A finished test as JUnit XML (as Maestro's xUnit output), so CI systems show it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime

from coordinator.outcome.results import TestResult, latency_line

__all__ = ["junit_xml"]


def _seconds(start: str, end: str) -> float:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):  # unknown (a test collected after its coordinator was lost)
        return 0.0


def _per_s(rate: float | None) -> str:
    return "none" if rate is None else f"{rate:.1f}/s"


def junit_xml(result: TestResult, cases: list[TestResult]) -> bytes:
    """One test case per phase (a fixed-rate test has one; an incremental test one per step).
    Its text is read by people in a CI page: times in ms, as the console's line below it."""
    # An invalid case did not measure the SUT: an error, as a test that could not run is.
    failures = sum(1 for c in cases if c.outcome == "failure")
    errors = sum(1 for c in cases if c.outcome == "invalid")
    record = result.record
    suite = ET.Element(
        "testsuite",
        name=f"maestro.{record.kind or 'test'}",
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        time=f"{_seconds(record.started or '', record.end or ''):.3f}",
        timestamp=record.started or "",
    )
    properties = ET.SubElement(suite, "properties")
    for key, value in sorted(record.labels.items()):
        ET.SubElement(properties, "property", name=str(key), value=str(value))
    for case in cases:
        c = case.record
        element = ET.SubElement(
            suite,
            "testcase",
            classname=f"maestro.{c.kind or 'test'}",
            name=case.test_id,
            time=f"{_seconds(c.started or '', c.end or ''):.3f}",
        )
        if case.outcome == "invalid":
            ET.SubElement(element, "error", type="invalid", message=case.reason or "invalid").text = case.reason or ""
        elif not case.passed:
            ET.SubElement(element, "failure", message=case.reason or "failed").text = case.reason or ""
        s = case.summary
        rr = s.request_reply
        # A success's reason is what held (coordinator.outcome.results.held): said as the console says it.
        said = f"success: {case.reason}\n" if case.passed and case.reason else ""
        if s.error is None and rr is not None:
            # A closed system's figure is its response time; its latency_us is the request leg,
            # which read as "latency p50 2.5 ms" where the responses took 9.4.
            times = rr.response_time_us
            figures, line = (
                (
                    f"response_p50_ms={times.p50 / 1000:.3f} response_p99_ms={times.p99 / 1000:.3f}",
                    f"response time p50 {times.p50 / 1000:.3f} ms  p99 {times.p99 / 1000:.3f} ms",
                )
                if rr.replies
                else ("response_time=none", "response time: none (no reply came in time)")
            )
            ET.SubElement(element, "system-out").text = said + (
                f"requests={rr.requests} replies={rr.replies} timed_out={rr.timed_out} "
                f"throughput={rr.throughput_per_s:.1f}/s {figures}\n{line}"
            )
        elif s.error is None:
            latency = (
                "latency=none"
                if s.latency_untrusted or not s.latency_samples  # no figure, not one of 0 ms
                else f"p50_ms={s.latency_us.p50 / 1000:.3f} p99_ms={s.latency_us.p99 / 1000:.3f}"
                + (f" latency_uncertainty_ms={s.latency_uncertainty_us / 1000:.3f}" if s.latency_uncertainty_us else "")
            )
            ET.SubElement(element, "system-out").text = said + (
                f"sent={s.sent} received={s.received} lost={s.lost} duplicates={s.duplicates} "
                f"receive_rate={_per_s(s.receive_rate.of(s.received))} {latency}\n{latency_line(s)}"
            )
    # The test's own outcome, a series' included ("all 3 phases succeeded"; invalid where a step
    # measured no SUT), after its cases as JUnit's schema has it.
    ET.SubElement(suite, "system-out").text = f"{result.outcome}" + (f": {result.reason}" if result.reason else "")
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)

"""The console's lines of a result: rates in msg/s and MB/s, and a closed system's response
time first (#40: "latency p50 2.4 ms" was its request leg, the response took 10.7 ms)."""

import xml.etree.ElementTree as ET
from typing import Any

from coordinator.outcome.junit import junit_xml
from coordinator.outcome.results import TestResult, loss_verdict, percent, phase_row
from protocol.figures import TestFigures
from protocol.test_record import TestRecord

_COUNTS = {"sent": 20_000, "received": 20_000, "lost": 0, "duplicates": 0}


def _summary(**extra: Any) -> TestFigures:
    return TestFigures.from_json(
        _COUNTS
        | {
            "send_rate": {"mean": 10_000.0, "min": 9_990.0, "max": 10_010.0},
            "receive_rate": {"mean": 9_500.0, "min": 9_000.0, "max": 10_000.0},
            "latency_us": {"p50": 2_400.0, "p99": 9_000.0, "max": 12_000.0},
            "latency_samples": 20_000,
        }
        | extra
    )


def test_rates_carry_mb_per_s_from_the_message_size() -> None:
    result = TestResult("t-1", "success", None, _summary(), TestRecord.from_json({"definition": {"size": 1024}}), "")
    lines = str(result).splitlines()
    # 10,000 msg/s x 1,024 B = 10.24 MB/s; 9,500 x 1,024 = 9.728.
    assert lines[2] == "  send rate 10,000.0 msg/s (10.24 MB/s)  receive rate 9,500.0 msg/s (9.73 MB/s)"
    assert lines[3].startswith("  latency p50 2.400 ms  p99 9.000 ms")


def test_without_a_size_the_rates_are_msg_per_s_only() -> None:
    lines = str(TestResult("t-1", "success", None, _summary(), TestRecord("t"), "")).splitlines()
    assert lines[2] == "  send rate 10,000.0 msg/s  receive rate 9,500.0 msg/s"


def test_a_generator_bound_success_says_so_under_its_outcome() -> None:
    busy = "sender s1 used 97 % of a core on average (...): these figures show the generator's limit, not the SUT's"
    peers = [
        {"name": "s1", "role": "sender", "generator_bound": busy},
        {"name": "s2", "role": "sender"},
        {"name": "r1", "role": "receiver"},
    ]
    lines = str(TestResult("t-3", "success", None, _summary(peers=peers), TestRecord("t"), "")).splitlines()
    assert lines[:2] == ["test t-3: success", f"  generator-bound: {busy}"]
    assert sum("generator-bound" in line for line in lines) == 1  # s2 was not
    # Where the verdict already names it (invalid for its shortfall), it is not said twice.
    why = f"the load generator was the limit: ...: {busy}"
    invalid = TestResult("t-4", "invalid", why, _summary(peers=peers), TestRecord("t"), "")
    assert not [line for line in str(invalid).splitlines()[1:] if "generator-bound" in line]
    assert "generator-bound" not in str(TestResult("t-5", "success", None, _summary(), TestRecord("t"), ""))


def test_a_repeated_tests_estimates_read_in_ms_and_per_second() -> None:
    statistics = {
        "throughput": {"mean": 186.94, "ci95": [180.0, 193.88], "n": 3},
        "response_time_p99_us": {"mean": 15_250.0, "ci95": [14_000.0, 16_500.0], "n": 3},
        "receive_rate": {"mean": 50.0, "ci95": [50.0, 50.0], "n": 2},
    }
    lines = str(
        TestResult("t-6", "success", None, _summary(), TestRecord.from_json({"statistics": statistics}), "")
    ).splitlines()
    assert lines[-3:] == [
        "  throughput: mean 186.9 requests/s, 95% CI [180.0, 193.9] requests/s (n=3)",
        "  response time p99: mean 15.250 ms, 95% CI [14.000, 16.500] ms (n=3)",
        "  receive rate: mean 50.0 msg/s, 95% CI [50.0, 50.0] msg/s (n=2)",
    ]


def test_a_closed_system_leads_with_its_response_time_and_has_no_latency_line() -> None:
    rr = {
        "requests": 1_000,
        "replies": 998,
        "timed_out": 2,
        "late": 0,
        "throughput_per_s": 186.9,
        "response_time_us": {"p50": 10_700.0, "p99": 15_000.0},
        "request_leg_us": {"p50": 2_400.0},
        "replier_us": {"p50": 5_100.0},
        "reply_leg_us": {"p50": 3_100.0},
        "littles_law": {"clients": 2, "throughput_x_time": 2.01, "deviation_percent": 0.5},
    }
    result = TestResult(
        "t-2", "success", None, _summary(request_reply=rr), TestRecord.from_json({"definition": {"size": 256}}), ""
    )
    lines = str(result).splitlines()
    assert lines[1] == (
        "  response time p50 10.700 ms  p99 15.000 ms  (request leg p50 2.400 ms, replier 5.100 ms, reply leg 3.100 ms)"
    )
    assert lines[2].startswith("  closed system: 1,000 requests, 998 replies, 2 timed out")
    assert lines[3].startswith("  Little's law: 2 waiting")
    assert not [line for line in lines if "latency" in line], lines
    # Not one reply in time: no response time, and no 0.000 ms in its place; no Little's law.
    none = rr | {"replies": 0, "timed_out": 1_000, "response_time_us": {}, "littles_law": {}}
    lines = str(TestResult("t-3", "failure", "...", _summary(request_reply=none), TestRecord("t"), "")).splitlines()
    assert lines[1] == "  response time: none (no reply came in time)"
    assert lines[2].startswith("  closed system: 1,000 requests, 0 replies, 1,000 timed out")
    assert not [line for line in lines if "0.000 ms" in line or "Little" in line], lines


def test_the_figures_hints_follow_them() -> None:
    hint = "sender s1 fell 613 ms behind its schedule at p99 while its process was not the limit: ..."
    lines = str(TestResult("t-6", "success", None, _summary(hints=[hint]), TestRecord("t"), "")).splitlines()
    assert lines[3].startswith("  latency p50 2.400 ms") and lines[4] == f"  hint: {hint}"
    assert "hint:" not in str(TestResult("t-7", "success", None, _summary(), TestRecord("t"), ""))


def test_a_series_says_which_phase_its_figures_are() -> None:
    phases = [TestResult(f"r.run0{n}", "success", None, _summary(), TestRecord("t"), "") for n in (1, 2, 3)]
    repeated = TestResult("r", "success", None, _summary(), TestRecord("r", kind="repeated"), "", phases, phases[1])
    lines = str(repeated).splitlines()
    assert lines[1] == "  figures of r.run02, the repetition nearest the mean rate:"
    assert lines[2].startswith("  sent 20,000")
    failed = TestResult("r", "failure", "run03: ...", _summary(), TestRecord("r", kind="repeated"), "", phases)
    assert "  figures of r.run03, the last phase:" in str(failed).splitlines()
    assert "figures of" not in str(phases[0])  # one run's figures are its own


def test_a_series_rates_carry_mb_per_s_from_the_size_of_the_test_it_repeats() -> None:
    """A series' definition holds its size in `base`: its lines had no MB/s at all."""
    statistics = {"receive_rate": {"mean": 10_000.0, "ci95": [9_000.0, 11_000.0], "n": 3}}
    record = TestRecord.from_json(
        {"kind": "repeated", "definition": {"kind": "repeated", "base": {"size": 1024}}, "statistics": statistics}
    )
    first = TestResult("r01", "success", None, _summary(), record, "")
    lines = str(TestResult("rep", "success", None, _summary(), record, "", steps=[first], best=first)).splitlines()
    assert "  send rate 10,000.0 msg/s (10.24 MB/s)  receive rate 9,500.0 msg/s (9.73 MB/s)" in lines
    assert lines[-1] == "  receive rate: mean 10,000.0 msg/s (10.24 MB/s), 95% CI [9,000.0, 11,000.0] msg/s (n=3)"


def test_a_phase_row_has_no_latency_where_no_message_came_back() -> None:
    """A phase that failed before any message came back: its row in the series' test.json (and
    the series report's table) showed p50 0 ms, a figure it never measured."""
    record = TestRecord.from_json({"definition": {"rate": 40, "parallel": 1}})
    empty = _summary(received=0, latency_us={"p50": 0.0, "p99": 0.0, "max": 0.0}, latency_samples=0)
    assert phase_row(TestResult("t.b-01", "failure", "no message", empty, record, "")).latency_us is None
    measured = phase_row(TestResult("t.b-02", "success", None, _summary(), record, "")).latency_us
    assert measured is not None and measured.p50 == 2_400.0


def test_junit_gives_a_closed_systems_response_time_not_its_request_leg() -> None:
    """junit.xml said "latency p50 2.521 ms" (the request leg) where the responses took 9.4 ms."""
    times = {"p50": 9_415.0, "p90": 15_000.0, "p99": 20_591.0, "max": 30_000.0, "mean": 10_000.0}
    rr = {"requests": 240, "replies": 238, "timed_out": 2, "throughput_per_s": 30.0, "response_time_us": times}
    result = TestResult("t-rr", "success", None, _summary(request_reply=rr), TestRecord("t-rr"), "")
    out = ET.fromstring(junit_xml(result, [result])).find("testcase/system-out")
    assert out is not None and out.text == (
        "requests=240 replies=238 timed_out=2 throughput=30.0/s response_p50_ms=9.415 response_p99_ms=20.591\n"
        "response time p50 9.415 ms  p99 20.591 ms"
    )


def test_a_run_stopped_before_its_warm_up_ended_has_no_rate_not_one_of_0() -> None:
    """A hostile pass: a test that failed 1 s into its load printed "send rate 0.0 msg/s" beside
    4,609 sent: no message came after the warm-up, so there is no window to measure a rate in."""
    zero = {"mean": 0.0, "min": 0.0, "max": 0.0}
    early = _summary(send_rate=zero, receive_rate=zero)
    result = TestResult("t-1", "failure", "stopped", early, TestRecord.from_json({"definition": {"size": 1000}}), "")
    assert "  send rate none (no message after the warm-up)  receive rate none (no message after the warm-up)" in (
        str(result).splitlines()
    )
    out = ET.fromstring(junit_xml(result, [result])).find("testcase/system-out")
    assert out is not None and out.text is not None and "receive_rate=none " in out.text
    # Nothing sent: a rate of 0 is what it measured.
    idle = _summary(sent=0, received=0, send_rate=zero, receive_rate=zero)
    assert (
        "  send rate 0.0 msg/s (0.00 MB/s)  receive rate 0.0 msg/s (0.00 MB/s)"
        in str(
            TestResult("t-2", "failure", "no SUT", idle, TestRecord.from_json({"definition": {"size": 1000}}), "")
        ).splitlines()
    )


def test_junit_says_times_in_ms_as_the_console_does() -> None:
    """#40: junit.xml's text said p50_us=2400 above "latency p50 2.400 ms": one unit for people."""
    result = TestResult("t-ms", "success", "all 20,000 messages arrived", _summary(), TestRecord("t-ms"), "")
    out = ET.fromstring(junit_xml(result, [result])).find("testcase/system-out")
    assert out is not None and out.text == (
        "success: all 20,000 messages arrived\n"
        "sent=20000 received=20000 lost=0 duplicates=0 receive_rate=9500.0/s p50_ms=2.400 p99_ms=9.000\n"
        "latency p50 2.400 ms  p99 9.000 ms  max 12.000 ms"
    )
    assert ET.fromstring(junit_xml(result, [result])).findtext("system-out") == "success: all 20,000 messages arrived"
    # No sample: no figure, not one of 0 ms (a receiver that got nothing read p50_ms=0.000).
    nothing = _summary(received=0, lost=20_000, latency_samples=0, latency_us={"p50": 0.0, "p99": 0.0})
    failed = TestResult("t-0", "failure", "lost 20,000 of 20,000", nothing, TestRecord("t-0"), "")
    text = ET.fromstring(junit_xml(failed, [failed])).findtext("testcase/system-out") or ""
    assert "latency=none" in text and "p50_ms" not in text and "latency: no samples" in text, text


def test_a_share_reads_to_three_significant_digits() -> None:
    """One message of a million lost read "(0.000%; bound 0.000%)", as if none were."""
    cases = [(0.0, "0%"), (1.0, "100%"), (0.125, "12.5%"), (0.03, "3%"), (0.0123456, "1.23%"), (1e-6, "0.0001%")]
    assert [percent(ratio) for ratio, _ in cases] == [said for _, said in cases]
    figures = TestFigures.from_json({"sent": 1_000_000, "lost": 1})
    assert loss_verdict(figures, 0.0) == "lost 1 of 1,000,000 messages (0.0001%; bound 0%)"

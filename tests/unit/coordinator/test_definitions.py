from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from coordinator import Action, Fail, FixedRateTest, Flow, IncrementalTest, RequestReplyTest, UnboundedTest
from coordinator.cli.commands import test_from_args as definition_from_args
from coordinator.cli.main import build_parser
from coordinator.definitions import (
    AbaTest,
    DefinitionError,
    RepeatedTest,
    SearchTest,
    SweepTest,
    workload,
    workload_labels,
)
from coordinator.definitions.declared import load_test_file
from coordinator.outcome.junit import junit_xml
from coordinator.outcome.results import TestResult, Verdict, held, judge, loss_verdict
from protocol.figures import TestFigures
from protocol.test_record import TestRecord


def test_a_request_reply_test_becomes_requesters_and_repliers_options() -> None:
    test = RequestReplyTest(
        request_url="amqp://h/requests?confirms=false",
        reply_url="amqp://h/amq.rabbitmq.reply-to",
        clients=4,
        outstanding=2,
        think_time="exp:10ms",
        service_time="5ms",
        request_timeout="2s",
        duration="1m",
    )
    (flow,) = test.all_flows()
    sender = test.sender_options(flow, "t-1")
    # The reply address rides in the request URL, the one the requesters' driver opens.
    assert sender["send_url"] == ["amqp://h/requests?confirms=false&reply_to=amq.rabbitmq.reply-to"]
    assert "rate_per_s" not in sender and sender["parallel_count"] == 4
    assert (sender["request_reply"], sender["outstanding"], sender["think_time"]) == (True, 2, "exp:10ms")
    assert sender["request_timeout_s"] == 2.0
    receiver = test.receiver_options(flow, "t-1")
    assert receiver["receive_url"] == sender["send_url"]
    assert (receiver["request_reply"], receiver["service_time"]) == (True, "5ms")
    assert test.KIND == "request-reply" and test.target_rate() == 0
    # An AMQP 1.0 reply address keeps its leading slash, as its destination does.
    amqp10 = RequestReplyTest(request_url="amqp10://h//queue/rq", reply_url="amqp10://h//queue/replies")
    assert amqp10.sender_options(amqp10.all_flows()[0], "t-1")["send_url"] == [
        "amqp10://h//queue/rq?reply_to=/queue/replies"
    ]
    # A sweep's step changes the clients.
    stepped = test.with_load(0, 8)
    (step_flow,) = stepped.all_flows()
    assert stepped.sender_options(step_flow, "t-2")["parallel_count"] == 8
    with pytest.raises(DefinitionError, match="needs request_url"):
        RequestReplyTest()


def test_a_sweep_over_clients_of_a_request_reply_test_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "rr.toml"
    path.write_text(
        'kind = "sweep"\nrequest_url = "amqp://h/requests"\nclients = 1\nthink_time = "exp:10ms"\n'
        "[sweep]\ngrid = { parallel = [1, 2, 4, 8] }\n"
    )
    sweep, _ = load_test_file(path)
    assert isinstance(sweep, SweepTest) and isinstance(sweep.base, RequestReplyTest)
    clients = []
    for point in sweep.points():
        step = sweep.at(point)
        (flow,) = step.all_flows()
        options = step.sender_options(flow, "t")
        assert options["request_reply"] and options["think_time"] == "exp:10ms"
        clients.append(options["parallel_count"])
    assert clients == [1, 2, 4, 8]
    (single, _) = load_test_file(_write(tmp_path / "one.toml", 'kind = "request-reply"\nrequest_url = "amqp://h/r"\n'))
    assert isinstance(single, RequestReplyTest)
    with pytest.raises(DefinitionError, match="names no reply address"):
        RequestReplyTest(request_url="amqp://h/requests", reply_url="amqp://h/")
    # Only the reply address is taken from it: options and a %d were dropped or sent literally.
    with pytest.raises(DefinitionError, match=r"^reply_url takes no options \(destinations=1-2\): give them in"):
        RequestReplyTest(request_url="amqp://h/requests", reply_url="amqp://h/replies?destinations=1-2")
    with pytest.raises(DefinitionError, match=r"^reply_url: one reply address for every client, without %d$"):
        RequestReplyTest(request_url="amqp://h/requests", reply_url="amqp://h/replies-%d")


def test_a_comma_separated_list_of_urls_is_several_urls_wherever_it_is_given() -> None:
    """`--send-url U1,U2` (a repeatable flag given once) arrived as the list ["U1,U2"], which
    was taken whole: its second URL, password and all, named a queue on the SUT."""
    u1, u2 = "amqp://guest:secret@h:5672/q1", "amqp://guest:secret@h:5673/q2"
    for given in (f"{u1},{u2}", [f"{u1},{u2}"], [f"{u1}, ", u2]):
        test = FixedRateTest(send_url=given, parallel=2)
        (flow,) = test.all_flows()
        assert flow.urls() == ([u1, u2], [u1, u2])
        assert test.sender_options(flow, "t")["send_url"] == [u1, u2]
        assert "secret" not in workload(test)
    # A sweep over a URL option puts it on each URL.
    sweep = SweepTest(FixedRateTest(send_url=[f"{u1},{u2}"], parallel=2), {"url.prefetch": [5]})
    (flow,) = sweep.at({"url.prefetch": 5}).all_flows()
    assert flow.urls()[0] == [f"{u1}?prefetch=5", f"{u2}?prefetch=5"]
    # More URLs than clients a worker: the last would get no load (a hostile pass: named in the
    # workload line and sent nothing), or no reader.
    with pytest.raises(
        DefinitionError,
        match=r"2 send URLs for 1 client\(s\) a worker: .* amqp://guest:\*\*\*@h:5673/q2 would be sent nothing",
    ):
        FixedRateTest(send_url=[u1, u2], receive_url=u1)
    with pytest.raises(DefinitionError, match=r"3 receive URLs for 2 client\(s\) .* would be read by no one"):
        FixedRateTest(send_url=[u1, u2], receive_url=f"{u1},{u2},{u1}x", parallel=2)
    with pytest.raises(DefinitionError, match="give parallel=2 or more"):
        FixedRateTest(send_url=[u1, u2], parallel=4, profile=((0, 10, 1),))
    # An option's value that holds a password is not shown in the refusal.
    with pytest.raises(DefinitionError) as refused:
        FixedRateTest(send_url=f"{u1}?destinations=1-2,{u2}?destinations=x")
    assert "secret" not in str(refused.value)


def test_a_fixed_rate_test_becomes_options_for_each_role() -> None:
    test = FixedRateTest(send_url="amqp://h/q", rate=50, parallel=4, duration=90, size="~1KB", warm_up="5s")
    (flow,) = test.all_flows()
    sender = test.sender_options(flow, "t-1")
    assert sender["send_url"] == ["amqp://h/q"] and sender["rate_per_s"] == 50 and sender["parallel_count"] == 4
    assert sender["duration"] == "90s" and sender["warm_up_s"] == 5.0
    receiver = test.receiver_options(flow, "t-1")
    assert receiver["receive_url"] == ["amqp://h/q"] and "duration" not in receiver and "rate_per_s" not in receiver
    assert test.target_rate() == 200
    assert FixedRateTest(send_url="amqp://h/q", count=1000).sender_options(flow, "t-1")["duration"] == 1000
    # `{test_id}` in a URL becomes the phase's id: a fresh queue per phase.
    placed = FixedRateTest(send_url="amqp://h/q-{test_id}", receive_url="amqp://h/r-{test_id}", rate=1)
    (flow,) = placed.all_flows()
    assert placed.sender_options(flow, "t-2")["send_url"] == ["amqp://h/q-t-2"]
    assert placed.receiver_options(flow, "t-2")["receive_url"] == ["amqp://h/r-t-2"]
    assert UnboundedTest(send_url="amqp://h/q").rate == 0


def test_several_flows_with_their_own_senders() -> None:
    # Seed 004 §7.4: two queues, one fed by two senders and one by five.
    test = FixedRateTest(
        rate=10, flows=(Flow("amqp://h/a", senders=2, receivers=1), Flow("amqp://h/b", senders=5, parallel=2))
    )
    assert test.target_rate() == 10 * 2 + 10 * 5 * 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "needs send_url"),
        ({"send_url": "amqp://h/q", "duration": "ten minutes"}, "ten minutes"),
        ({"send_url": "amqp://h/q", "rate": -1}, "rate must be >= 0"),
        ({"send_url": "amqp://h/q", "options": {"prefetsh": 1}}, "unknown option"),
        ({"send_url": "amqp://h/q", "duration": "100 messages"}, "give a time"),
        # A SUT URL's scheme and query options, before any daemon is asked (#15 item 4).
        ({"send_url": "stomp://h/q"}, "the scheme must be one of amqp, "),
        ({"send_url": "amqp://h/q?prefetsh=5"}, "unknown option 'prefetsh' for amqp://"),
        ({"send_url": "amqp://h/q", "receive_url": "kafka://h/t?partitioner=hash"}, "expected one of library, client"),
        # A run that would measure nothing (#37): a warm-up as long as it, or a count of none.
        ({"send_url": "amqp://h/q", "warm_up": "10s", "duration": "3s"}, r"the warm-up \(10 s\) is as long as the run"),
        ({"send_url": "amqp://h/q", "warm_up": 5, "duration": 5}, "nothing would be measured"),
        ({"send_url": "amqp://h/q", "count": 0}, "a message count must be positive"),
    ],
)
def test_bad_definitions_are_refused_when_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        FixedRateTest(**fields)  # type: ignore[arg-type]


def test_incremental_steps_raise_the_rate_then_the_parallel_count() -> None:
    test = IncrementalTest(
        FixedRateTest(send_url="amqp://h/q"),
        initial_rate=100,
        ceiling_rate=300,
        rate_step=100,
        initial_parallel=1,
        ceiling_parallel=3,
        parallel_step=2,
    )
    assert test.steps() == [(100, 1), (200, 1), (300, 1), (100, 3), (200, 3), (300, 3)]
    with pytest.raises(DefinitionError):
        IncrementalTest(FixedRateTest(send_url="amqp://h/q"), initial_rate=10, ceiling_rate=5, rate_step=1)


def test_a_toml_file_declares_the_same_test(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'kind = "incremental"\nsend_url = "amqp://h/q"\nduration = "10s"\n'
        "[fail]\nlatency_ms = 20\n[incremental]\ninitial_rate = 10\nceiling_rate = 30\nrate_step = 10\n"
    )
    test, text = load_test_file(path)
    assert isinstance(test, IncrementalTest) and text == path.read_text()
    assert test.base.fail == Fail(latency_ms=20) and test.steps() == [(10, 1), (20, 1), (30, 1)]
    path.write_text('send_url = "amqp://h/q"\n[fail]\nlatency = 20\n')
    with pytest.raises(DefinitionError, match=r"\[fail\]: unknown key latency"):
        load_test_file(path)
    path.write_text("send_url = \n")
    with pytest.raises(DefinitionError, match="not valid TOML"):
        load_test_file(path)


def test_junit_has_one_case_per_phase_and_names_the_failure() -> None:
    def result(test_id: str, reason: str | None) -> TestResult:
        started, ended = "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:10+00:00"
        record = TestRecord(test_id, kind="fixed-rate", started=started, ended=ended, labels={"a": 1})
        outcome = "failure" if reason else "success"
        return TestResult(test_id, outcome, reason, TestFigures(), record, "")

    steps = [result("t.step01", None), result("t.step02", "latency p99 3 ms > bound 2 ms")]
    suite = ET.fromstring(junit_xml(result("t", None), steps))
    assert (suite.get("tests"), suite.get("failures"), suite.get("time")) == ("2", "1", "10.000")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["t.step01", "t.step02"]
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == "latency p99 3 ms > bound 2 ms"
    assert suite.find("properties/property").get("name") == "a"  # type: ignore[union-attr]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_command_line_makes_a_request_reply_test() -> None:
    argv = ["test", "request-reply", "--request-url", "amqp://h/requests", "--reply-url"]
    argv += ["amqp://h/amq.rabbitmq.reply-to", "--clients", "4", "--think-time", "exp:10ms", "--duration", "30s"]
    test, _ = definition_from_args(build_parser().parse_args(argv))
    assert isinstance(test, RequestReplyTest)
    assert (test.parallel, test.think_time, test.send_url) == (
        4,
        "exp:10ms",
        "amqp://h/requests?reply_to=amq.rabbitmq.reply-to",
    )
    with pytest.raises(DefinitionError, match="needs --request-url"):
        definition_from_args(build_parser().parse_args(["test", "request-reply", "--send-url", "amqp://h/q"]))


def test_requests_that_time_out_fail_a_test_as_lost_messages_do() -> None:
    figures = TestFigures.from_json({"sent": 100, "lost": 0, "request_reply": {"timed_out": 3}})
    assert loss_verdict(figures, 0.0) == "3 of 100 requests timed out (3%; bound 0%)"
    assert loss_verdict(figures, 0.05) is None
    assert loss_verdict(TestFigures.from_json({"sent": 100, "lost": 0}), 0.0) is None


def test_a_second_request_url_is_refused_not_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile pass: two --request-url ran on the second alone, without a word."""
    argv = ["test", "request-reply", "--request-url", "nats://h/a", "--request-url", "nats://h/b"]
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(argv)
    assert refused.value.code == 2
    assert "--request-url is given twice: a request/reply test takes one" in capsys.readouterr().err


def test_a_closed_system_takes_no_rate() -> None:
    """A hostile pass: `--rate 50` on a request-reply test was dropped without a word."""
    argv = ["test", "request-reply", "--request-url", "amqp://h/r", "--rate", "50"]
    with pytest.raises(DefinitionError, match="rate 50: a request/reply test is a closed system"):
        definition_from_args(build_parser().parse_args(argv))
    assert RequestReplyTest(request_url="amqp://h/r").rate == 0.0


def test_the_incremental_and_repeated_executors_take_a_closed_system_as_their_base() -> None:
    base = RequestReplyTest(request_url="amqp://h/requests", clients=1, think_time="10ms", duration="5s")
    incremental = IncrementalTest(
        base, initial_rate=1, ceiling_rate=1, rate_step=1, initial_parallel=1, ceiling_parallel=8, parallel_step=3
    )
    steps = [base.with_load(rate, parallel) for rate, parallel in incremental.steps()]
    # Each step is a request/reply phase with more clients; a closed system has no rate to raise.
    assert all(isinstance(step, RequestReplyTest) for step in steps)
    options = [step.sender_options(step.all_flows()[0], "t") for step in steps]
    assert [o["parallel_count"] for o in options] == [1, 4, 7]
    assert all(o["request_reply"] and o["think_time"] == "10ms" for o in options)
    repeated = RepeatedTest(base=base, times=3)
    assert repeated.base is base and repeated.KIND == "repeated"


def _figures(send_rate: float, **peer: object) -> dict[str, object]:
    return {
        "sent": 4000,
        "lost": 0,
        "send_rate": {"mean": send_rate},
        "latency_samples": 4000,
        "latency_us": {"p50": 1000.0},
        "peers": [{"name": "s1", "role": "sender", **peer}],
    }


def _judge(figures: dict[str, object], test: FixedRateTest) -> Verdict:
    return judge(TestFigures.from_json(figures), test)


def test_a_generator_that_fell_short_of_the_target_makes_the_run_invalid() -> None:
    # 400 msg/s asked, 320.6 sent (80 %), and the sender used a core: the generator's figure.
    test = FixedRateTest(send_url="amqp://h/q", rate=400)
    busy = "sender s1 used 97 % of a core on average"
    verdict = _judge(_figures(320.6, generator_bound=busy), test)
    assert verdict.failure is None
    (why,) = verdict.invalid
    assert why == (
        f"the load generator was the limit: its senders sent 320.6 msg/s of the 400.0 asked (80%; bound 95%): {busy}"
    )
    # Within the bound, or short with a generator that was not the limit (the SUT's back-pressure): valid.
    assert _judge(_figures(381.0, generator_bound=busy), test).invalid == ()
    assert _judge(_figures(320.6), test).invalid == ()
    # The user's bound: 25 % short allowed.
    lenient = FixedRateTest(send_url="amqp://h/q", rate=400, fail=Fail(max_generator_shortfall=0.25))
    assert _judge(_figures(320.6, generator_bound=busy), lenient).invalid == ()


def test_a_success_says_what_held() -> None:
    """#40: the headline's "success" stood alone, above a red generator-bound warning."""
    test = FixedRateTest(send_url="amqp://h/q", rate=400)
    assert (
        held(TestFigures.from_json(_figures(400.0)), test)
        == "all 4,000 messages arrived; sent 100% of the 400 msg/s asked"
    )
    bounded = FixedRateTest(
        send_url="amqp://h/q",
        rate=200,
        parallel=2,
        fail=Fail(max_loss_ratio=0.01, latency_ms=10, min_rate_ratio=0.9, max_generator_shortfall=0.1),
    )
    lossy = _figures(388.0, generator_bound="sender s1 used 97 % of a core") | {"lost": 12, "duplicates": 3}
    assert held(TestFigures.from_json(lossy), bounded) == (
        "lost 12 of 4,000, within the 1% allowed; 3 duplicates; latency p99 within 10 ms in every second; "
        "every sender at 90% of its target rate or more; sent 97% of the 400 msg/s asked; "
        "but the load generator was its own limit (within the 10% allowed)"
    )
    closed = _figures(0.0) | {
        "request_reply": {"requests": 500, "timed_out": 0},
        "latency_untrusted": "a clock stepped",
    }
    assert held(TestFigures.from_json(closed), FixedRateTest(send_url="amqp://h/q", rate=0)) == (
        "all 500 requests had their reply in time; but its latency is no figure"
    )


def test_an_inspector_that_collected_nothing_makes_the_run_invalid() -> None:
    figures = _figures(400.0)
    figures["peers"] = [
        {
            "name": "i1",
            "role": "inspector",
            "inspector_shortfall": ["inspector rabbitmq on i1 collected no sample (3 failed)"],
        }
    ]
    assert _judge(figures, FixedRateTest(send_url="amqp://h/q", rate=400)).invalid == (
        "inspector rabbitmq on i1 collected no sample (3 failed)",
    )


def test_flags_given_override_a_files_values(tmp_path: Path) -> None:
    """#40: `--file` took no flag; each flag given now goes over the file's value, options,
    labels and fail conditions key by key, and what is not given stays the file's."""
    path = _write(
        tmp_path / "t.toml",
        'name = "nightly"\nsend_url = "amqp://h/q"\nrate = 50\nduration = "30s"\nparallel = 2\n'
        '[options]\nconfirm_window = 10\nprocesses = 2\n[labels]\nbuild = "a"\n[fail]\nmax_loss_ratio = 0.01\n',
    )
    argv = ["test", "--file", str(path), "--rate", "80", "--duration", "5s", "--name", "quick"]
    argv += ["--option", "processes=1", "--label", "branch=main", "--fail-stall-s", "9"]
    test, text = definition_from_args(build_parser().parse_args(argv))
    assert isinstance(test, FixedRateTest) and text == path.read_text()
    assert (test.name, test.rate, test.duration, test.parallel, test.send_url) == ("quick", 80, "5s", 2, "amqp://h/q")
    assert test.options == {"confirm_window": 10, "processes": 1}
    assert test.labels == {"build": "a", "branch": "main"}
    assert (test.fail.max_loss_ratio, test.fail.stall_s) == (0.01, 9)
    untouched, _ = definition_from_args(build_parser().parse_args(["test", "--file", str(path)]))
    assert (untouched.name, untouched.rate, untouched.options) == (
        "nightly",
        50,
        {"confirm_window": 10, "processes": 2},
    )


def test_a_time_and_a_message_count_are_one_bound(tmp_path: Path) -> None:
    """#40: `--count` with `--duration` ran the count and dropped the time without a word. Both
    are refused; a flag replaces the file's other bound."""
    with pytest.raises(DefinitionError, match="duration '5s' and count 10: give one of them"):
        FixedRateTest(send_url="amqp://h/q", duration="5s", count=10)
    with pytest.raises(DefinitionError, match="give one of them"):
        definition_from_args(
            build_parser().parse_args(["test", "--send-url", "amqp://h/q", "--count", "10", "--duration", "5s"])
        )
    timed = _write(tmp_path / "timed.toml", 'send_url = "amqp://h/q"\nduration = "30s"\n')
    counted = _write(tmp_path / "counted.toml", 'send_url = "amqp://h/q"\ncount = 500\n')
    by_count, _ = definition_from_args(build_parser().parse_args(["test", "--file", str(timed), "--count", "10"]))
    assert isinstance(by_count, FixedRateTest) and by_count.duration_option() == 10
    by_time, _ = definition_from_args(build_parser().parse_args(["test", "--file", str(counted), "--duration", "5s"]))
    assert isinstance(by_time, FixedRateTest) and (by_time.count, by_time.duration_option()) == (None, "5s")
    both = _write(tmp_path / "both.toml", 'send_url = "amqp://h/q"\nduration = "30s"\ncount = 500\n')
    with pytest.raises(DefinitionError, match=r"both\.toml: duration '30s' and count 500"):
        load_test_file(both)


def test_the_workload_in_parts_for_metrics_labels() -> None:
    test = FixedRateTest(send_url="amqp://u:secret@h/q", rate=50, parallel=2, senders=2, count=900, size="1KB")
    assert workload_labels(test) == {
        "rate_per_client": "50",
        "target_rate": "200",
        "clients": "2",
        "senders": "2",
        "receivers": "1",
        "message_size": "1KB",
        "length": "900 messages per sender",
        "warm_up": "0s",
        "destination": "amqp://u:***@h/q",
    }
    closed = workload_labels(RequestReplyTest(request_url="amqp://h/r", clients=4))
    assert (closed["rate_per_client"], closed["target_rate"], closed["clients"]) == ("closed", "closed", "4")


def test_the_test_as_it_will_run_is_said_in_one_line() -> None:
    test = FixedRateTest(send_url="amqp://u:secret@h/q", rate=50, parallel=2, senders=2, duration="30s", warm_up="5s")
    assert workload(test) == (
        "fixed-rate: 50 msg/s per client, 200 in all; 2 client(s) in each of 2 sender(s) and 1 receiver(s); "
        "256 B; 30s, warm-up 5s; amqp://u:***@h/q"
    )
    assert workload(RepeatedTest(base=test, times=3)).startswith("repeated: 50 msg/s per client, 200 in all, 3 times;")
    # A series states its steps' load, not its base test's rate.
    assert workload(IncrementalTest(base=test, initial_rate=10, ceiling_rate=40, rate_step=10)).startswith(
        "incremental: 10 to 40 msg/s per client in steps of 10; 1 client(s) in each of 2 sender(s)"
    )
    widening = IncrementalTest(base=test, initial_rate=10, ceiling_rate=20, rate_step=10, ceiling_parallel=4)
    assert workload(widening).startswith(
        "incremental: 10 to 20 msg/s per client in steps of 10, at 1 to 4 clients in steps of 1; the step's client(s)"
    )
    assert workload(SearchTest(base=test, low_rate=5, high_rate=80)).startswith(
        "search: searched between 5 and 80 msg/s per client to 5%;"
    )
    assert workload(SweepTest(base=test, grid={"rate": [10, 40], "option.confirm_window": [1, 8]})).startswith(
        "sweep: the point's msg/s per client, each point of rate 10, 40 x option.confirm_window 1, 8;"
    )  # not the base's 50 (a hostile pass: "100 msg/s per client" stood above points of 20 and 40)
    assert workload(SweepTest(base=test, grid={"parallel": [1, 4]})).startswith(
        "sweep: 50 msg/s per client, each point of parallel 1, 4; the point's client(s) in each of 2 sender(s)"
    )
    # As test.json names the kind; a size keeps its own unit; seconds given as a number say so.
    odd = FixedRateTest(send_url="amqp://h/q", rate=0, size="~1kb", duration=30, warm_up=0.0)
    assert workload(odd) == (
        "unbounded: as fast as it goes; 1 client(s) in each of 1 sender(s) and 1 receiver(s); ~1kb; 30s, "
        "warm-up 0s; amqp://h/q"
    )
    assert "; 100-2000 B; " in workload(replace(odd, size="100-2000")) and "; 1MiB; " in workload(
        replace(odd, size="1MiB")
    )
    closed = RequestReplyTest(
        request_url="amqp://h/q", clients=2, outstanding=3, think_time="5ms", service_time="2ms", request_timeout="3s"
    )
    assert workload(closed).startswith(
        "request-reply: closed: 3 outstanding per client, think time 5ms, service time 2ms, request timeout 3s; "
        "2 client(s) in each of 1 requester(s); 1 replier(s); 256 B;"
    )
    # The options given, in the line (a hostile pass: --option confirm_window=10 was said nowhere).
    assert workload(replace(test, options={"processes": 2, "confirm_window": 10})).endswith(
        "amqp://u:***@h/q; confirm_window=10; processes=2"
    )


def test_calibrate_repeats_the_test_n_times_as_runs_of_its_history() -> None:
    """`--calibrate N` (#39): N runs of the test, each one of its history's, for the gate's noise."""

    def made(*argv: str) -> object:
        return definition_from_args(build_parser().parse_args(["test", *argv]))[0]

    test = made("unbounded", "--send-url", "amqp://h/q", "--duration", "5s", "--name", "nightly", "--calibrate", "8")
    assert isinstance(test, RepeatedTest) and test.times == 8
    assert (test.base.rate, test.base.name, test.base.duration) == (0.0, "nightly", "5s")
    fixed = made("--send-url", "amqp://h/q", "--rate", "40", "--name", "n", "--calibrate", "5")
    assert isinstance(fixed, RepeatedTest) and (fixed.times, fixed.base.rate) == (5, 40)
    for argv, why in (
        (("--send-url", "amqp://h/q", "--name", "n", "--calibrate", "4"), "at least 5"),
        (("--send-url", "amqp://h/q", "--calibrate", "5"), "--calibrate needs --name"),
        (("sweep", "--send-url", "amqp://h/q", "--name", "n", "--calibrate", "5"), "not a sweep"),
    ):
        with pytest.raises(DefinitionError, match=why):
            made(*argv)


def test_an_aba_test_states_its_candidate_and_refuses_what_it_cannot_compare() -> None:
    base = FixedRateTest(send_url="amqp://guest:secret@old:5672/q", rate=40, name="nightly")
    candidate = replace(base, send_url="amqp://guest:secret@new:5672/q")
    aba = AbaTest(base=base, candidate=candidate, times=3)
    assert aba.name == "nightly" and aba.KIND == "aba"
    line = workload(aba)
    assert line.startswith("aba: 40 msg/s per client, 40 in all, 3 times as the baseline, the candidate ")
    assert "(amqp://guest:***@new:5672/q)" in line and line.endswith("amqp://guest:***@old:5672/q")
    assert "secret" not in line
    for times in (1, 2.5, "3", None, True):
        with pytest.raises(DefinitionError, match=f"times {times!r}: an A-B-A test needs at least 2 runs a leg"):
            AbaTest(base=base, candidate=candidate, times=times)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"times 2\.5: repeat a test at least twice"):
        RepeatedTest(base=base, times=2.5)  # type: ignore[arg-type]
    # Where the build is may differ (URLs, inspectors, labels, an action's agent); what is asked of it not.
    moved = replace(
        candidate,
        inspectors=("rabbitmq=http://new:15672",),
        labels={"sut_version": "4.1"},
        actions=(Action("10s", "new-agent", "restart", ("broker",)),),
    )
    AbaTest(base=replace(base, actions=(Action(10, "old-agent", "restart", ("broker",)),)), candidate=moved)
    with pytest.raises(DefinitionError, match="the candidate differs from the baseline in rate, options: an A-B-A"):
        AbaTest(base=base, candidate=replace(candidate, rate=80, options={"confirm_window": 8}))
    # A URL asks by its scheme and query: another protocol, or other client settings, is no other build.
    for url in ("amqp://guest:secret@new:5672/q?prefetch=1", "nats://new:4222/q"):
        with pytest.raises(DefinitionError, match="differs from the baseline in send_url, receive_url"):
            AbaTest(base=base, candidate=replace(base, send_url=url))
    AbaTest(base=base, candidate=replace(base, send_url="amqp://new/q", receive_url="amqp://other/q"))
    with pytest.raises(DefinitionError, match="base: a test"):
        AbaTest(base=None, candidate=None)  # type: ignore[arg-type]
    flows = (Flow("amqp://old/a", senders=2),)
    with pytest.raises(DefinitionError, match="differs from the baseline in flows"):
        AbaTest(base=replace(base, flows=flows), candidate=replace(base, flows=(Flow("amqp://new/a", senders=3),)))
    AbaTest(base=replace(base, flows=flows), candidate=replace(base, flows=(Flow("amqp://new/a", senders=2),)))
    replier = RequestReplyTest(send_url="amqp://h/requests")
    with pytest.raises(DefinitionError, match="the candidate is a RequestReplyTest, the baseline a FixedRateTest"):
        AbaTest(base=base, candidate=replier)

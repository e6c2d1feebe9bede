"""A running test as the data server shows it: `/metrics` scraped during a real run, and the live
page in a real browser, which turns into the report when the test ends."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.browser import Browser, artifacts_dir
from support.processes import Daemons
from support.runs import run_with

from coordinator import TestResult
from coordinator.definitions.fixed_rate import FixedRateTest
from coordinator.definitions.request_reply import RequestReplyTest
from coordinator.running.local import LocalCluster

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    return body if url.endswith("/metrics") else json.loads(body)


def _metrics(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(_get(f"{url}/metrics")):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _in_background(daemons: Daemons, url: str, test: FixedRateTest) -> tuple[threading.Thread, list[TestResult]]:
    results: list[TestResult] = []
    thread = threading.Thread(target=lambda: results.append(run_with(daemons, url, test, peers=2)), daemon=True)
    thread.start()
    return thread, results


def _running_test(url: str, name: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for test in _get(f"{url}/api/live"):
            if test["name"] == name:
                return str(test["test_id"])
        time.sleep(0.2)
    raise AssertionError(f"the data server never listed a running test named {name}")


def _a_running_test(
    daemons: Daemons, url: str, what: str, duration: str
) -> tuple[threading.Thread, list[TestResult], str]:
    """A sender and a receiver daemon, and a 100 msg/s test on them in the background: its
    thread, where its result will be, and its id once the data server lists it running."""
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    name = f"{what} {uuid.uuid4().hex[:6]}"
    test = FixedRateTest(send_url=_queue(), rate=100, duration=duration, name=name)
    thread, results = _in_background(daemons, url, test)
    return thread, results, _running_test(url, name)


def _queue() -> str:
    return f"amqp://guest:guest@127.0.0.1:5672/maestro-live-{uuid.uuid4().hex[:8]}"


def test_metrics_grow_during_a_run_and_end_at_the_summary(daemons: Daemons, data_server: tuple[str, Path]) -> None:
    url, _ = data_server
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    name = f"metrics {uuid.uuid4().hex[:6]}"
    thread, results = _in_background(daemons, url, FixedRateTest(send_url=_queue(), rate=200, duration="8s", name=name))
    test_id = _running_test(url, name)
    sent_seen: list[float] = []
    while thread.is_alive() and len(sent_seen) < 30:
        samples = _metrics(url)
        mine = [v for labels, v in samples.get("maestro_test_messages_sent_total", []) if labels["test_id"] == test_id]
        if mine:
            sent_seen.append(mine[0])
        time.sleep(0.5)
    thread.join(60)
    assert results, "the test did not finish"
    result = results[0]
    assert result.outcome == "success", result.reason
    # Scraped while it ran: the counter only grew, and did grow, over several scrapes.
    assert sent_seen == sorted(sent_seen) and len(set(sent_seen)) >= 3, sent_seen

    samples = _metrics(url)

    def final(name: str, **labels: str) -> float:
        [value] = [v for ls, v in samples[name] if ls["test_id"] == test_id and labels.items() <= ls.items()]
        return value

    summary = _get(f"{url}/api/results/{test_id}/summary")  # the figures of summary.json
    assert final("maestro_test_messages_sent_total") == summary["sent"] == result.summary.sent == 1600
    assert final("maestro_test_messages_received_total") == summary["received"] == 1600
    assert final("maestro_test_lost_messages") == summary["lost"] == 0
    assert final("maestro_test_duplicate_messages_total") == summary["duplicates"] == 0
    assert final("maestro_test_state", state="finished") == 1
    # Each peer labelled with the test's name, its own name, role and host.
    [(labels, sent)] = [(ls, v) for ls, v in samples["maestro_peer_messages_sent_total"] if ls["test_id"] == test_id]
    assert (labels["test_name"], labels["peer"], labels["role"]) == (name, "s1", "sender") and labels["host"]
    assert sent == 1600
    latency = [ls["quantile"] for ls, _ in samples["maestro_peer_interval_latency_seconds"] if ls["test_id"] == test_id]
    assert sorted(latency) == ["0.5", "0.99", "1"]
    # The receiver's latency since its run began, as a histogram in seconds: cumulative buckets,
    # +Inf equal to the count, and the count its samples (one a message) as of its last report.
    buckets = {ls["le"]: v for ls, v in samples["maestro_peer_latency_seconds_bucket"] if ls["test_id"] == test_id}
    [count] = [v for ls, v in samples["maestro_peer_latency_seconds_count"] if ls["test_id"] == test_id]
    ordered = sorted(buckets.items(), key=lambda item: float(item[0]))
    assert [v for _, v in ordered] == sorted(buckets.values()) and buckets["+Inf"] == count
    assert 1400 <= count <= 1600, count  # 200 msg/s for 8 s; the last second's report may come before its end
    assert [v for ls, v in samples["maestro_peer_cpu_usage_ratio"] if ls["test_id"] == test_id and ls["peer"] == "s1"]
    # The workload in parts, and the bytes: the messages times their size.
    [info] = [ls for ls, _ in samples["maestro_test_info"] if ls["test_id"] == test_id]
    assert (info["rate_per_client"], info["clients"], info["message_size"]) == ("200", "1", "256 B"), info
    assert final("maestro_test_sent_bytes_total") == 1600 * 256


def test_the_live_page_gains_points_then_turns_into_the_report(
    daemons: Daemons, data_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = data_server
    thread, results, test_id = _a_running_test(daemons, url, "live", "20s")
    with Browser(tmp_path) as browser:
        # The index lists it, with its progress and a link to its live page.
        browser.open(f"{url}/")
        assert browser.run(f"return document.querySelector('#running a[href=\"/live/{test_id}\"]') !== null")
        browser.open(f"{url}/live/{test_id}")
        seen = []
        said: list[Any] = ["", "", [], True]
        while thread.is_alive() and len(seen) < 8:
            time.sleep(1.5)
            seen.append(browser.run("return [Number(document.documentElement.dataset.points || 0), "
                                    "Number(document.documentElement.dataset.updates || 0), "
                                    "document.documentElement.dataset.jsErrors || '']"))  # fmt: skip
            if len(seen) == 4:
                browser.screenshot(artifacts_dir() / "live-page.png")
                said = browser.run("return [document.getElementById('workload').textContent, "
                                   "document.getElementById('totals').textContent, "
                                   "[...document.querySelectorAll('#peers th')].map(h => h.textContent), "
                                   "document.getElementById('stop').hidden]")  # fmt: skip
        first = browser.run("return Number(document.documentElement.dataset.firstPoints)")
        thread.join(90)
        assert results and results[0].outcome == "success", results and results[0].reason
        # The page, opened once, drew more points as updates came in, with no script error.
        assert all(errors == "" for _, _, errors in seen), seen
        assert seen[-1][0] > seen[0][0] >= first, (first, seen)
        assert seen[-1][1] >= 4, seen
        rows = browser.run("return document.querySelectorAll('#peers tbody tr').length")
        assert rows == 2
        # While it ran: the workload first, as the coordinator states it; totals so far and the
        # rates now in msg/s and MB/s; latency in ms, for people (#40).
        workload, sums, headings, stop_hidden = said
        assert not stop_hidden  # the stop button, while it runs
        assert workload.startswith("Workload: fixed-rate: 100 msg/s per client, 100 in all; 1 client(s)"), workload
        now = r"[\d,.]+ msg/s \([\d.]+ MB/s\)"
        counts = r"sent [\d,]+, received [\d,]+, lost so far \d+, duplicates \d+, errors \d+"
        assert re.fullmatch(rf"{counts}; now sending {now}, receiving {now}", sums), sums
        assert "latency p99 ms" in headings and "latency_p99_us" not in headings, headings
        # Then it turns into the report, which the data server builds when asked.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not browser.url().endswith("/report/index.html"):
            time.sleep(0.5)
        assert browser.url().endswith(f"/results/{test_id}/report/index.html"), browser.url()
        while time.monotonic() < deadline and not browser.run("return document.querySelector('.main-svg') !== null"):
            time.sleep(1)
        assert browser.run("return document.title") == test_id
        browser.screenshot(artifacts_dir() / "live-page-then-report.png")
        # Ended, it is no longer "running now" on the index: it is listed apart, with its outcome.
        browser.open(f"{url}/")
        assert browser.run(f"return document.querySelector('#running a[href=\"/live/{test_id}\"]') === null")
        link = f'#finished a[href="/results/{test_id}/report/"]'
        assert browser.run(f"return document.querySelector('{link}') !== null")
        assert "success" in browser.run("return document.querySelector('#finished').textContent")


def _ask_stop(url: str, test_id: str, token: str | None, content_type: str = "application/json") -> int:
    request = urllib.request.Request(f"{url}/api/live/{test_id}/stop", data=b"{}", method="POST")
    request.add_header("Content-Type", content_type)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_live_pages_stop_needs_the_token_then_stops_the_test_as_ctrl_c_would(
    daemons: Daemons, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#40: the stop button posts to the data server, which tells the coordinator in the answer
    to its next live post; a server with a token takes the stop only with it."""
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-for-the-live-stop\n")
    token_file.chmod(0o600)
    monkeypatch.setenv("MAESTRO_TOKEN_FILE", str(token_file))  # the server, the daemons, the coordinator
    with LocalCluster(tmp_path / "server-logs", broker_url="unused") as local:
        url = local.data_server(tmp_path / "results")
        thread, results, test_id = _a_running_test(daemons, url, "stop", "60s")
        time.sleep(3)
        assert _ask_stop(url, test_id, None) == 401
        assert _ask_stop(url, test_id, "not-the-token") == 401
        assert _ask_stop(url, "no-such-test", "t0ken-for-the-live-stop") == 409
        # A cross-site form or text/plain POST (no CORS preflight) is not a stop, token or not.
        assert _ask_stop(url, test_id, "t0ken-for-the-live-stop", content_type="text/plain") == 415
        assert thread.is_alive()  # the refused asks stopped nothing
        asked = time.monotonic()
        assert _ask_stop(url, test_id, "t0ken-for-the-live-stop") == 200
        thread.join(60)
        assert results, "the test did not end"
        result = results[0]
        assert (result.outcome, result.reason) == ("failure", "stopped from the live page (by 127.0.0.1)")
        assert time.monotonic() - asked < 20, "stopped long after it was asked"  # drain and collection included
        # Stopped as Ctrl-C would: the senders stopped early, and what they sent all arrived.
        s = result.summary
        assert 0 < s.sent < 6000 and s.received == s.sent and s.lost == 0, s
        # What it meant to send is what came due before the stop, not the 60 s schedule's 6,000
        # (the sender keeps to its schedule at 100 msg/s: within a few messages of what it sent).
        assert s.accounting.intended is not None and s.sent <= s.accounting.intended <= s.sent + 5, s.accounting


def _post(url: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_post_that_is_no_live_update_is_refused_and_metrics_stay_up(data_server: tuple[str, Path]) -> None:
    """A live post is checked as it comes (protocol.live): a peer that is not an object or a
    count that is not a number was taken before and broke /metrics for every test on the server."""
    url, _ = data_server
    good = {"test_id": "t-live", "name": "n", "peers": [{"name": "s1", "role": "sender", "sent": 5}], "points": []}
    assert _post(f"{url}/api/live/t-live", json.dumps(good).encode())[0] == 200
    for peers, why in (([1], "with its name"), ([{"name": "s1", "sent": "many"}], "a count must be a whole number")):
        status, text = _post(f"{url}/api/live/t-live", json.dumps(good | {"peers": peers}).encode())
        assert (status, why in text) == (400, True), text
    assert _post(f"{url}/api/live/t-other", json.dumps(good).encode())[0] == 400  # another test's update
    # A count no float holds (it made every scrape fail), NaN, and a body nested past the parser.
    huge = json.dumps(good).replace('"sent": 5', '"sent": ' + "9" * 400).encode()
    assert _post(f"{url}/api/live/t-live", huge)[0] == 400
    status, text = _post(f"{url}/api/live/t-live", json.dumps(good).replace('"sent": 5', '"sent": NaN').encode())
    assert (status, "NaN is not a JSON number" in text) == (400, True), text
    status, text = _post(f"{url}/api/live/t-live", b"[" * 100_000 + b"]" * 100_000)
    assert (status, "nested too deeply" in text) == (400, True), text
    # The good one stands: /metrics answers with its count.
    (sample,) = [v for labels, v in _metrics(url)["maestro_test_messages_sent_total"] if labels["test_id"] == "t-live"]
    assert sample == 5


def test_a_request_reply_test_is_watched_by_its_response_time(
    daemons: Daemons, data_server: tuple[str, Path], tmp_path: Path
) -> None:
    """#40: a closed system's live page leads with its response time, requests, replies and
    timeouts, not with the request leg a receiver sees."""
    url, _ = data_server
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    name = f"live rr {uuid.uuid4().hex[:6]}"
    test = RequestReplyTest(request_url=_queue(), clients=2, service_time="5ms", duration="12s", name=name)
    thread, results = _in_background(daemons, url, test)
    test_id = _running_test(url, name)
    with Browser(tmp_path) as browser:
        browser.open(f"{url}/live/{test_id}")
        said: list[Any] = []
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline:
            time.sleep(1.5)
            said = browser.run("return [document.getElementById('totals').textContent, "
                               "[...document.querySelectorAll('#peers th')].map(h => h.textContent), "
                               "document.querySelector('#latency .gtitle')?.textContent, "
                               "document.getElementById('latency').data?.[1]?.y?.filter(v => v !== null), "
                               "document.documentElement.dataset.jsErrors || '', "
                               "[document.documentElement.scrollWidth, window.innerWidth]]")  # fmt: skip
            if said[3] and len(said[3]) >= 3:
                break
        browser.screenshot(artifacts_dir() / "live-page-request-reply.png")
        thread.join(90)
    assert results and results[0].outcome == "success", results and results[0].reason
    totals, headings, title, p99_ms, errors, (page_px, window_px) = said
    assert errors == "", errors
    # Its peer table's 17 columns fit the 1,280 px window (one heading a line, they took 1,324).
    assert page_px <= window_px == 1280, (page_px, window_px)
    assert re.fullmatch(
        r"requests [\d,]+, replies [\d,]+, timed out 0, errors 0; now [\d,.]+ msg/s.* requested", totals
    )
    assert title == "Response time, worst requester, per second", title
    assert {"replies", "timed out", "response p99 ms"} <= set(headings), headings
    # The replier's latency is the request leg, named so; a column no peer fills is left out.
    assert "request leg p99 ms" in headings and "latency p99 ms" not in headings, headings
    assert "send lag p99 ms" not in headings, headings
    # Each reply waits 5 ms of service and two trips through RabbitMQ: the p99 is over 5 ms, and
    # under the 12 s of the test (a µs figure drawn as ms would read 5,000 and over).
    assert p99_ms and all(5.0 <= v < 1000 for v in p99_ms), p99_ms
    # /metrics: the response time since the run began, as a histogram in seconds. Every response
    # took the replier's 5 ms at least, and the count is the replies as of the last report (a
    # second or so before the end).
    samples = _metrics(url)
    buckets = {
        ls["le"]: v for ls, v in samples["maestro_peer_response_time_seconds_bucket"] if ls["test_id"] == test_id
    }
    [count] = [v for ls, v in samples["maestro_peer_response_time_seconds_count"] if ls["test_id"] == test_id]
    rr = results[0].summary.request_reply
    assert rr is not None and buckets["0.005"] == 0 and buckets["+Inf"] == count, (buckets, count)
    assert 0.8 * rr.replies <= count <= rr.replies, (count, rr.replies)

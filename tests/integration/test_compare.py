"""Runs side by side on `maestro serve`: the /compare page drawn by headless Chromium over
result folders the real writers made, its JSON, and the ids it refuses."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.browser import artifacts_dir, drawn_page
from support.synthetic import history_run, one_loss_one_duplicate

from coordinator.running.local import LocalCluster
from reports.summary import summarize

NAME = "nightly compare"
OTHER = "nightly compare patched"


def _stored(root: Path, name: str, night: int, gap_us: int, latency_us: int) -> str:
    """A run of `name` with the real writers' files (reports.summary reads them: 40 sent every
    `gap_us` from T0 + 0.25 s, one lost, one duplicated, each `latency_us` late), and its
    test.json as the coordinator stores it, figures included."""
    test_id = history_run(root, name, night, 0.0)
    test = one_loss_one_duplicate(root, test_id, gap_us=gap_us, latencies_us=[latency_us] * 40)
    record = json.loads((test / "test.json").read_text())
    (test / "test.json").write_text(json.dumps(record | {"summary": summarize(test).to_json()}))
    return test_id


def _results(root: Path) -> tuple[str, str, str]:
    """Five nights of NAME with only their figures (10.3, 10.32, 10.34, 10.36 and 10.28 msg/s), then
    three with files: A of NAME (10/s, 1 ms), B of OTHER (8/s, 2 ms) and C of OTHER (10/s, its
    latency read below zero and clamped: no figure)."""
    for night, rate in enumerate((10.3, 10.32, 10.34, 10.36, 10.28)):
        history_run(root, NAME, night, rate)
    a = _stored(root, NAME, 10, 100_000, 1_000)
    b = _stored(root, OTHER, 11, 125_000, 2_000)
    c = _stored(root, OTHER, 12, 100_000, -2_000)
    return a, b, c


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def _legend(page: str, chart: str) -> list[str]:
    """The names in a drawn chart's legend: one per trace Plotly drew."""
    section = page.split(f'id="{chart}"', 1)[1].split('class="compare-chart"', 1)[0]
    return re.findall(r'class="legendtext"[^>]*>([^<]+)<', section)


@pytest.mark.timeout(240)  # a data server and two Chromium runs: 15 s alone
def test_three_runs_side_by_side_in_a_browser(tmp_path: Path) -> None:
    """Each run's arrivals per second and latency curve drawn, the delta table against the
    first run with NAME's noise band, an untrusted latency left empty and undrawn."""
    root = tmp_path / "results"
    root.mkdir()
    a, b, c = _results(root)
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        url = local.data_server(root)
        page = drawn_page(f"{url}/compare?ids={a},{b},{c}", "compare.png", height=2200)
        status, table = _get(f"{url}/api/compare?ids={a},{b},{c}")
    assert "data-js-errors" not in page, page.split("data-js-errors")[1][:300]
    assert page.count('class="main-svg"') >= 2 * 2  # both charts drew
    assert _legend(page, "throughput") == [a, b, c]
    assert _legend(page, "percentiles") == [a, b]  # C's latency is no figure: no curve
    assert f"{c}: no latency figure: latency not measured: 40 samples read below zero" in page
    # Arrivals by whole second (T0 + 0.251 s on; #19 twice, #39 never): A 8, 10, 11, 10, 1 and
    # B 6, 8, 9, 8, 8, 1, whose whole seconds make 31 / 3 and 33 / 4 msg/s: -20.2 %.
    rate = f'data-figure="receive_rate" data-run="{b}">-20.2 %, worse beyond the noise'
    assert f'<td class="change beyond-noise worse" {rate}' in page
    assert f'<td class="value" data-figure="receive_rate" data-run="{a}">10.3</td>' in page
    # NAME's six comparable runs, A's 10.333 among them: median 10.3267, MAD 0.02, sigma 1.4826 x
    # 0.02 / 10.3267 = 0.287 %; the gate's band over 6 runs is 15.63 of them, ±4.5 %.
    assert '<td class="noise" data-figure="receive_rate">±4.5 % (15.6 sigma of 6 runs)</td>' in page
    assert f'<td class="value" data-figure="latency_p50_us" data-run="{b}">2,000.0</td>' in page
    assert f'<td class="value" data-figure="latency_p99_us" data-run="{c}"></td>' in page  # empty, never 0
    assert (artifacts_dir() / "compare.png").stat().st_size > 10_000

    assert status == 200
    figures = {f["key"]: f for f in table["figures"]}
    assert figures["receive_rate"]["values"] == pytest.approx([31 / 3, 33 / 4, 31 / 3])
    assert figures["receive_rate"]["changes"][0] == {
        "percent": pytest.approx(100 * (33 / 4 - 31 / 3) / (31 / 3)),
        "worse": True,
        "beyond_noise": True,
    }
    assert figures["latency_p50_us"]["values"] == [1000.0, 2000.0, None]
    assert figures["loss_ratio"]["values"] == [1 / 40] * 3
    assert table["runs"][2]["latency_untrusted"].startswith("latency not measured")


def test_wrong_ids_are_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "results"
    root.mkdir()
    a, b, _ = _results(root)
    # A test folder that is a link out of the results: its files are never read.
    outside = tmp_path / "outside"
    one_loss_one_duplicate(outside, "secret")
    (root / "linked").symlink_to(outside / "secret")
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        url = local.data_server(root)
        one, nine = _get(f"{url}/compare?ids={a}"), _get(f"{url}/compare?ids=" + ",".join(f"t{i}" for i in range(9)))
        twice = _get(f"{url}/api/compare?ids={a},{a}")
        unknown = _get(f"{url}/compare?ids={a},no-such-test")
        climbing = _get(f"{url}/compare?ids={a},..%2F..%2Fetc")
        linked = _get(f"{url}/api/compare?ids={a},linked")
        first_named = _get(f"{url}/compare/previous/{b}")

        class Kept(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *_: object) -> None:
                return None

        with pytest.raises(urllib.error.HTTPError) as moved:
            urllib.request.build_opener(Kept).open(f"{url}/compare/previous/{a}", timeout=30)
        moved.value.close()
    assert one == (400, {"detail": "ids: give 2 to 8 test ids, comma-separated, not 1"})
    assert nine == (400, {"detail": "ids: give 2 to 8 test ids, comma-separated, not 9"})
    assert twice == (400, {"detail": "ids: a test is named twice"})
    assert unknown == (404, {"detail": "no test no-such-test"})
    assert climbing[0] == 400 and climbing[1]["detail"].startswith("test id '../../etc': use letters")
    assert linked == (400, {"detail": "linked is a symbolic link, which may lead out of the data root"})
    assert first_named == (404, {"detail": f"no run named {OTHER!r} started before {b}"})
    # A's previous run of its name is the fifth night: the report's link lands on the pair.
    assert moved.value.code == 307
    assert moved.value.headers["location"] == f"/compare?ids=nightly-compare-004,{a}"

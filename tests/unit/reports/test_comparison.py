"""Runs side by side (reports.comparison, reports.compare_page) on hand-worked answers, and the
links to them from the history page, the results index and a report."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from support.synthetic import history_run

from protocol.figures import Percentiles, Rate, TestFigures
from protocol.test_record import TestRecord
from reports.compare_page import compare_page, previous_link
from reports.comparison import ComparedRun, NoiseBand, delta_table, noise_bands, previous_runs
from reports.history import FIGURES, Run, analyse, history_page, read_runs
from reports.report import build_index

NAME = "nightly rabbitmq"
DISTRIBUTION = ((50.0, 500.0), (99.0, 2_000.0), (100.0, 9_000.0))


def _figures(rate: float, p99_us: float = 2_000.0, lost: int = 0, untrusted: str | None = None) -> TestFigures:
    return TestFigures(
        sent=100_000,
        received=100_000 - lost,
        lost=lost,
        receive_rate=Rate(rate, rate, rate),
        latency_us=Percentiles(p50=p99_us / 4, p90=p99_us / 2, p99=p99_us, p999=p99_us * 2, max=1e5),
        latency_samples=100_000,
        latency_distribution_us=DISTRIBUTION,
        latency_untrusted=untrusted,
    )


def _run(test_id: str, figures: TestFigures, per_second: dict[int, int] | None = None) -> ComparedRun:
    return ComparedRun(
        test_id, figures, per_second or {}, TestRecord(test_id, name=NAME, started="2026-10-02T00:00:00")
    )


def _history(root: Path) -> list[Run]:
    """Five comparable nights at 998, 999, 1,000, 1,001 and 1,002 msg/s, then four that must
    not count: a failed one, one on another testbed, one of another workload and a
    generator-bound one, each far from 1,000."""
    for night, rate in enumerate((998.0, 999.0, 1000.0, 1001.0, 1002.0)):
        history_run(root, NAME, night, rate)
    history_run(root, NAME, 5, 100.0, outcome="failure")
    history_run(root, NAME, 6, 5_000.0, cpu_model="Other CPU")
    history_run(root, NAME, 7, 5_000.0, rate_per_client=2_000.0)
    history_run(root, NAME, 8, 100.0, generator_bound=True)
    return read_runs(root, NAME)


def test_the_noise_band_is_the_gates_over_the_comparable_runs_only(tmp_path: Path) -> None:
    runs = _history(tmp_path)
    bands = noise_bands(runs, runs[0].workload, runs[0].testbed)
    rate = bands["receive_rate"]
    # Median 1,000; deviations 2, 1, 0, 1, 2: MAD 1, sigma 1.4826 msg/s, 0.14826 % of the level;
    # the gate's band over 5 runs is 37.21 of them, ±5.52 %. Had the four others counted, the
    # median would be 1,000 and the MAD 2 (deviations 2, 1, 0, 1, 2, 900, 4,000, 4,000, 900).
    assert rate.noise is not None and (rate.runs, rate.noise.median) == (5, 1000.0)
    assert rate.noise.band == pytest.approx(37.2103 * 1.4826 / 1000)
    assert rate.text(FIGURES[0]) == "±5.5 % (37.2 sigma of 5 runs)"
    # Loss was 0 every night: no noise at all, so any rise is beyond it.
    assert bands["loss_ratio"].noise is not None and bands["loss_ratio"].noise.band == 0.0
    # Fewer than five comparable runs: unknown, and said with how many there were.
    few = noise_bands(runs[:3], runs[0].workload, runs[0].testbed)
    assert few["receive_rate"] == NoiseBand(3) and few["receive_rate"].text(FIGURES[0]) == "unknown (3 runs)"


def test_the_noise_is_that_since_the_last_change_point_where_five_follow_it(tmp_path: Path) -> None:
    """Ten nights near 1,000 msg/s, then six near 900: the noise of the last six only, median
    900 and sigma 0.16 % (all sixteen have median 997.5). With three after the step, all
    of them."""
    before = [1000.0, 1004.0, 996.0, 1002.0, 998.0, 1001.0, 999.0, 1003.0, 997.0, 1000.0]
    after = [900.0, 903.0, 897.0, 901.0, 899.0, 900.0]
    for night, rate in enumerate(before + after):
        history_run(tmp_path, NAME, night, rate)
    runs = read_runs(tmp_path, NAME)
    assert [s.run for s in analyse(NAME, runs).shifts["receive_rate"]] == [11]
    rate = noise_bands(runs, runs[0].workload, runs[0].testbed)["receive_rate"]
    # The last six: median 900, deviations 0, 3, 3, 1, 1, 0: MAD 1.
    assert rate.noise is not None and (rate.runs, rate.noise.median) == (6, 900.0)
    assert rate.noise.sigma == pytest.approx(1.4826 / 900)
    assert rate.text(FIGURES[0]) == "±2.6 % (15.6 sigma of 6 runs)"
    assert [s.run for s in analyse(NAME, runs[:13]).shifts["receive_rate"]] == [11]
    short = noise_bands(runs[:13], runs[0].workload, runs[0].testbed)["receive_rate"]
    # 897, 900, 903, 996, ..., 1,004: median 999.
    assert short.noise is not None and short.runs == 13 and short.noise.median == 999.0


def test_the_delta_of_a_known_pair_and_an_untrusted_latency(tmp_path: Path) -> None:
    runs = _history(tmp_path)
    bands = noise_bands(runs, runs[0].workload, runs[0].testbed)
    compared = [
        _run("A", _figures(1000.0)),
        _run("B", _figures(900.0, p99_us=2_100.0, lost=100)),
        _run("C", _figures(970.0, untrusted="a clock step during the test")),
    ]
    rows = {row.figure.key: row for row in delta_table(compared, bands)}
    rate = rows["receive_rate"]
    assert rate.values == (1000.0, 900.0, 970.0)
    [b, c] = rate.changes
    assert b is not None and (round(b.percent, 6), b.worse, b.beyond_noise) == (-10.0, True, True)
    assert c is not None and (round(c.percent, 6), c.worse, c.beyond_noise) == (-3.0, True, False)
    # Loss: 100 of 100,000 is 0.1 percentage points more, beyond a noise of none.
    loss = rows["loss_ratio"].changes[0]
    assert loss is not None and (round(loss.percent, 6), loss.worse, loss.beyond_noise) == (0.1, True, True)
    # C's latency is no figure: no value, no change.
    assert rows["latency_p99_us"].values == (2_000.0, 2_100.0, None)
    assert rows["latency_p99_us"].changes[1] is None

    page = compare_page(compared, bands, "/assets/plotly.min.js")
    assert '<td class="value" data-figure="receive_rate" data-run="B">900.0</td>' in page
    cell = (
        '<td class="change beyond-noise worse" data-figure="receive_rate" data-run="B">-10.0 %, worse beyond the noise'
    )
    assert cell in page
    within = '<td class="change within-noise" data-figure="receive_rate" data-run="C">-3.0 %, within the noise'
    assert within in page
    assert '<td class="noise" data-figure="receive_rate">±5.5 % (37.2 sigma of 5 runs)</td>' in page
    for key in ("latency_p50_us", "latency_p99_us", "latency_p999_us"):
        assert f'<td class="value" data-figure="{key}" data-run="C"></td>' in page  # empty, never 0
        assert f'<td class="change" data-figure="{key}" data-run="C"></td>' in page
    # The percentile chart: curves for A and B, none for C, which says why.
    percentiles = page.split('id="percentiles"', 1)[1]
    assert re.findall(r'"name":"([ABC])"', percentiles) == ["A", "B"]
    assert "C: no latency figure: a clock step during the test" in percentiles


def test_throughput_lines_up_runs_at_their_first_second_and_an_empty_second_is_zero() -> None:
    run = _run("A", _figures(10.0), {1_800_000_100: 5, 1_800_000_102: 7, 1_800_000_103: 6})
    assert run.throughput() == ([0, 1, 2, 3], [5, 0, 7, 6])
    page = compare_page([run, _run("B", _figures(10.0), {1_700_000_000: 4})], {}, "plotly.min.js")
    throughput = page.split('id="throughput"', 1)[1].split('id="percentiles"', 1)[0]
    assert re.findall(r'"name":"([AB])"', throughput) == ["A", "B"]
    assert '"x":[0,1,2,3]' in throughput and '"y":[5,0,7,6]' in throughput


def test_each_run_is_linked_to_the_one_of_its_name_before_it() -> None:
    def record(test_id: str, started: str, name: str = NAME, **more: object) -> dict[str, object]:
        return {"test_id": test_id, "name": name, "started": started, "summary": {"sent": 1}, **more}

    records = [
        record("c", "2026-10-03"),
        record("a", "2026-10-01"),
        record("b", "2026-10-02"),
        record("b2", "2026-10-02"),  # started with b: after it, by test id
        record("phase", "2026-10-04", phase_of="series"),  # one step of a series is no run
        record("again", "2026-10-04", phase_of="repeated", repetition=1),  # a repetition is
        {"test_id": "running", "name": NAME, "started": "2026-10-05"},  # no figures yet
        record("x", "2026-10-04", name="other"),
    ]
    assert previous_runs(TestRecord.from_json(r) for r in records) == {"b": "a", "b2": "b", "c": "b2", "again": "c"}


def test_the_history_index_and_report_link_to_the_comparison(tmp_path: Path) -> None:
    for night in range(3):
        history_run(tmp_path, NAME, night, 1000.0 + night)
    page = history_page(analyse(NAME, read_runs(tmp_path, NAME)), "/assets/plotly.min.js")
    assert '<a id="compare-newest" href="/compare?ids=nightly-rabbitmq-001,nightly-rabbitmq-002">' in page
    index = build_index(tmp_path).read_text()
    rows = {r.split('">', 2)[1].split("<", 1)[0]: r for r in index.split("<tr>")[2:]}
    assert 'href="compare?ids=nightly-rabbitmq-000,nightly-rabbitmq-001"' in rows["nightly-rabbitmq-001"]
    assert 'class="compare"' not in rows["nightly-rabbitmq-000"]  # the first run has none before it
    assert all('<input type="checkbox" class="pick"' in row for row in rows.values())
    assert 'id="compare-picked"' in index
    record = TestRecord.from_text((tmp_path / "nightly-rabbitmq-001" / "test.json").read_text())
    # From <root>/<test>/report/index.html up to the root, where the data server answers.
    link = previous_link("nightly-rabbitmq-001", record)
    assert 'href="../../../compare/previous/nightly-rabbitmq-001"' in link and "maestro serve" in link
    assert previous_link("p", replace(record, phase_of="series")) == ""
    assert "compare/previous/p" in previous_link("p", replace(record, phase_of="series", repetition=1))
    assert previous_link("t", TestRecord("t", started="2026-10-01")) == ""

"""The figures of a test folder against answers worked out by hand."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support.synthetic import T0_US, one_loss_one_duplicate

from reports.summary import generator_bound, inspector_shortfalls, rate_of, read_peers, summarize


def rate_over_seconds(times_us: list[int]) -> dict[str, float]:
    return rate_of(Counter(t // 1_000_000 for t in times_us))


def test_rates_count_whole_seconds_only() -> None:
    # 3 in second 0 (partial), 10 / 8 / 10 in seconds 1-3, 1 in second 4 (partial).
    times = [T0_US + 700_000 + i * 100_000 for i in range(3)]
    times += [T0_US + s * 1_000_000 + i * 100_000 for s, n in ((1, 10), (2, 8), (3, 10)) for i in range(n)]
    times += [T0_US + 4_000_000]
    assert rate_over_seconds(times) == {"mean": pytest.approx(28 / 3), "min": 8.0, "max": 10.0}
    assert rate_over_seconds([]) == {"mean": 0.0, "min": 0.0, "max": 0.0}
    # Under a second of data: the count itself, not a division by zero.
    assert rate_over_seconds([T0_US, T0_US + 10])["mean"] == 2.0


def test_a_test_folder_with_one_loss_and_one_duplicate(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    s = summarize(test)
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (40, 39, 1, 1)
    # Sends at 10/s: seconds 1, 2 and 3 are whole and hold 10 each.
    assert s["send_rate"] == {"mean": 10.0, "min": 10.0, "max": 10.0}
    # Latency from the HDR logs: each receiver records what is new to it, so the duplicate across
    # receivers is there too: 40 values 1000, 26000, ..., 976000 µs; p50 is the 20th, 476000 µs.
    assert s["latency_samples"] == 40
    assert s["latency_us"]["p50"] == pytest.approx(476_000, rel=1e-3)
    assert s["latency_us"]["max"] == pytest.approx(976_000, rel=1e-3)
    assert {p["name"] for p in s["peers"]} == {"s1", "r1", "r2"}


def test_the_summary_merges_the_writers_pieces_without_reading_a_row(tmp_path: Path) -> None:
    """Rows read (the pieces moved away) and pieces merged (the rate files emptied) give the
    same figures, and the known answer; a warm-up cut falls at the next whole second."""
    test = one_loss_one_duplicate(tmp_path)
    sender = test / "sender" / "s1"
    info = json.loads((sender / "peer.json").read_text())
    # Warm-up to T0 + 1.3 s: the cut is T0 + 2 s, leaving the sends of seconds 2, 3 and 4.
    info["warm_up_s"], info["warm_up_end_ns"] = 1.3, (T0_US + 1_300_000) * 1000
    (sender / "peer.json").write_text(json.dumps(info))
    merged = summarize(test)
    # 10/s from T0 + 0.25 s, cut at T0 + 2 s: second 2 is the first (left out as partial),
    # second 3 whole with 10, second 4 the last (2).
    assert merged["send_rate"] == {"mean": 10.0, "min": 10.0, "max": 10.0}
    # From the first send (T0 + 0.25 s + 10 µs) to the last arrival: message 38, sent at
    # T0 + 4.05 s, 976 ms on the way.
    assert merged["duration_s"] == pytest.approx(4.05 + 0.976 - 0.25001)

    pieces = sorted(test.glob("*/*/*-seconds.json"))
    assert len(pieces) == 3  # one per writer: s1, r1, r2
    # The same rows as a folder from before pieces existed: read row by row.
    rows_read = one_loss_one_duplicate(tmp_path / "again")
    (rows_read / "sender" / "s1" / "peer.json").write_text(json.dumps(info))
    for path in rows_read.glob("*/*/peer.json"):
        peer = json.loads(path.read_text())
        peer["files"] = [name for name in peer["files"] if not name.endswith("-seconds.json")]
        path.write_text(json.dumps(peer))
        (path.parent / f"{path.parent.parent.name}-seconds.json").unlink()
    assert summarize(rows_read) == merged

    for rate_file in test.glob("*/*/*.csv.gz"):
        rate_file.write_bytes(b"")  # a row read now would fail: "not a Maestro rate file"
    assert summarize(test) == merged


def test_a_saturated_sender_marks_the_run_generator_bound(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    assert generator_bound(read_peers(test)) == []
    info_path = test / "sender" / "s1" / "peer.json"
    info = json.loads(info_path.read_text())
    info["self_monitor"] = {"cpu_percent_mean": 97.0, "loop_lag_ms_max": 12.0}
    info["schedule_lag_us"] = {"99": 250_000}
    info_path.write_text(json.dumps(info))
    (why,) = generator_bound(read_peers(test))
    assert why.startswith("sender s1 used 97 % of a core") and "schedule lag p99 250.0 ms" in why
    # ... and summary.json says so on the sender's row: not a SUT figure.
    (sender,) = [p for p in summarize(test)["peers"] if p["role"] == "sender"]
    assert sender["generator_bound"] == why


def test_out_of_order_deliveries_are_summed_over_the_receivers(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    for receiver, late in (("r1", 2), ("r2", 1)):
        path = test / "receiver" / receiver / "peer.json"
        info = json.loads(path.read_text())
        for counts in info["per_sender"].values():
            counts["out_of_order"] = late
        path.write_text(json.dumps(info))
    (row,) = summarize(test)["per_sender"]
    assert (row["lost"], row["duplicates"], row["out_of_order"]) == (1, 1, 3)


@pytest.mark.parametrize(
    ("samples", "errors", "flagged"),
    [
        (61, 0, None),  # 60 s at 1 s: 61 expected
        (31, 5, None),  # half and a bit: thin, not flagged
        (30, 31, "inspector rabbitmq on i1 collected 30 of about 61 samples (31 failed; last error: 401)"),
        (0, 61, "inspector rabbitmq on i1 collected no sample (61 failed; last error: 401)"),
    ],
)
def test_an_inspector_that_collected_too_little_is_flagged(
    tmp_path: Path, samples: int, errors: int, flagged: str | None
) -> None:
    test = one_loss_one_duplicate(tmp_path)
    folder = test / "inspector" / "i1"
    folder.mkdir(parents=True)
    inspector = {"interval_s": 1.0, "samples": samples, "errors": errors, "last_error": "401" if errors else None}
    info = {"name": "i1", "role": "inspector", "host": "h", "started_ns": 0, "ended_ns": 60 * 10**9}
    (folder / "peer.json").write_text(json.dumps(info | {"inspectors": {"rabbitmq": inspector}}))
    (row,) = [p for p in summarize(test)["peers"] if p["role"] == "inspector"]
    assert row.get("inspector_shortfall") == ([flagged] if flagged else None)
    assert inspector_shortfalls(read_peers(test)) == ([flagged] if flagged else [])

"""Payload header, schedule, sequence accounting, rate files, latency logs: against known answers."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import random
import time
from array import array
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hdrh.log import HistogramLogReader

from protocol.hdr import HIGHEST_US, new_histogram
from protocol.ratefile import (
    RateFileWriter,
    RatePiece,
    arrivals_per_second,
    rate_seconds,
    read_rate_file,
    rows_text,
)
from protocol.sequences import (
    MergedCounts,
    SequenceCounts,
    SequenceTracker,
    dump_bitsets,
    load_bitset,
    merge_bitsets,
    union_bitsets,
)
from worker.latency import LatencyRecorder
from worker.payload import HEADER_BYTES, ForeignPayloadError, MessageHeader, key_of, make_body, read_header
from worker.schedule import Schedule
from worker.sender import SenderStats

# --- payload header ------------------------------------------------------------------------------


def test_header_round_trip_and_size() -> None:
    header = MessageHeader(key_of("t-1"), key_of("s1:0"), 41, 1_700_000_000_123_456_789, 1_700_000_000_123_999_000)
    body = make_body(header, 256, b"x" * 1000)
    assert len(body) == 256
    assert HEADER_BYTES == 44
    assert body[:4] == b"MPY\x01"
    assert read_header(body) == header
    # A size below the header still carries the whole header.
    assert len(make_body(header, 12, b"x" * 1000)) == HEADER_BYTES


def test_keys_are_stable_across_processes() -> None:
    # blake2b-64 of "t-1", fixed by the algorithm, not by this run.
    assert key_of("t-1") == int.from_bytes(hashlib.blake2b(b"t-1", digest_size=8).digest(), "big")
    assert key_of("a") != key_of("b")


@pytest.mark.parametrize("body", [b"", b"hello", b"MPY\x01" + b"\0" * 10, b"XXXX" + b"\0" * 60])
def test_foreign_payloads_are_named(body: bytes) -> None:
    with pytest.raises(ForeignPayloadError):
        read_header(body)


# --- schedule -------------------------------------------------------------------------------------


def test_uniform_schedule_is_exact_and_does_not_drift() -> None:
    schedule = Schedule(rate_per_s=3, start_ns=1_000)
    times = [schedule.next_intended(now_ns=0) for _ in range(3_000_001)]
    assert times[:4] == [1_000, 333_334_333, 666_667_666, 1_000_001_000]
    # After a million seconds at 3/s the schedule is still on the exact second.
    assert times[3_000_000] == 1_000 + 1_000_000 * 10**9


def test_a_late_sender_gets_intended_times_in_the_past() -> None:
    schedule = Schedule(rate_per_s=1000, start_ns=0)
    # The sender wakes up 5 ms late: the next five messages were all due already.
    assert [schedule.next_intended(now_ns=5_000_000) for _ in range(6)] == [
        0,
        1_000_000,
        2_000_000,
        3_000_000,
        4_000_000,
        5_000_000,
    ]


def test_the_messages_due_already_are_taken_together_and_no_more() -> None:
    schedule = Schedule(rate_per_s=1000, start_ns=0)
    assert schedule.next_intended(now_ns=5_000_000) == 0
    # Woken 5 ms late: 1..5 ms are due; 6 ms is not yet.
    assert schedule.take_due(5_000_000, before_ns=2**62, most=100) == [
        1_000_000,
        2_000_000,
        3_000_000,
        4_000_000,
        5_000_000,
    ]
    assert schedule.next_intended(now_ns=5_000_000) == 6_000_000
    # Never past `most`, nor into the next step of a profile (or the end): before_ns.
    assert schedule.take_due(20_000_000, before_ns=2**62, most=2) == [7_000_000, 8_000_000]
    assert schedule.take_due(20_000_000, before_ns=11_000_000, most=100) == [9_000_000, 10_000_000]
    assert schedule.take_due(20_000_000, before_ns=2**62, most=0) == []
    assert schedule.scheduled == 11


def _due_one_by_one(schedule: Schedule, now_ns: int, before_ns: int, most: int, early_ns: int) -> list[int]:
    """take_due as it was, message by message: what the constant rate's arithmetic must give."""
    due: list[int] = []
    while len(due) < most and (intended := schedule._upcoming()) <= now_ns + early_ns and intended < before_ns:
        due.append(int(intended))
        schedule._advance()
    return due


def test_the_due_messages_of_a_constant_rate_are_exactly_those_one_by_one_gives() -> None:
    """Rates whose intervals are not whole nanoseconds, wake-ups and bounds that fall on an
    intended time, between two, far behind and before the start: the same times, the same count."""
    rng = random.Random(11)
    for _ in range(20_000):
        rate = rng.choice([3, 7, 1000, 30_000, 110_000, 333_333, rng.uniform(0.5, 2_000_000)])
        start = rng.randrange(0, 10**12)
        fast, slow = Schedule(rate, start), Schedule(rate, start)
        for _ in range(rng.randrange(0, 4)):
            sent = rng.randrange(0, 10**6)
            fast._sent = slow._sent = sent
            at = start + int(rng.choice([sent, sent + rng.randrange(-5, 300)]) * 1e9 / rate)
            now = at + rng.choice([0, 1, -1, rng.randrange(-(10**6), 10**7)])
            before = rng.choice([2**62, at + rng.choice([0, 1, -1, rng.randrange(-(10**6), 10**7)])])
            most, early = rng.choice([1, 2, 27, 256, 1024]), rng.choice([0, 50_000, rng.randrange(0, 10**6)])
            assert fast.take_due(now, before, most, early) == _due_one_by_one(slow, now, before, most, early)
            assert fast.scheduled == slow.scheduled


def test_due_poisson_arrivals_are_the_ones_next_intended_would_give() -> None:
    one, other = Schedule(rate_per_s=1000, start_ns=0, poisson=True, seed=5), Schedule(1000, 0, True, seed=5)
    expected = [other.next_intended(now_ns=0) for _ in range(40)]
    due = [one.next_intended(now_ns=0), *one.take_due(expected[29] + 1, before_ns=2**62, most=100)]
    assert due == expected[:30]
    assert one.next_intended(now_ns=0) == expected[30]


def test_unbounded_schedule_is_now() -> None:
    schedule = Schedule(rate_per_s=0, start_ns=0)
    assert schedule.next_intended(now_ns=123) == 123
    assert schedule.unbounded


def test_poisson_arrivals_have_the_asked_mean_rate_and_are_repeatable() -> None:
    a = Schedule(rate_per_s=500, start_ns=0, poisson=True, seed=7)
    b = Schedule(rate_per_s=500, start_ns=0, poisson=True, seed=7)
    times_a = [a.next_intended(0) for _ in range(200_001)]
    assert times_a[:50] == [b.next_intended(0) for _ in range(50)]
    mean_rate = 200_000 / (times_a[-1] / 1e9)
    assert mean_rate == pytest.approx(500, rel=0.01)
    gaps = [y - x for x, y in itertools.pairwise(times_a)]
    # Exponential gaps: the standard deviation equals the mean.
    mean = sum(gaps) / len(gaps)
    std = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert std / mean == pytest.approx(1.0, rel=0.02)


# --- sequences ------------------------------------------------------------------------------------


def test_loss_duplicates_and_reordering_counted_exactly() -> None:
    tracker = SequenceTracker()
    for seq in [0, 1, 2, 5, 3, 3, 9, 1, 10]:
        tracker.record(seq)
    counts = tracker.counts()
    assert counts.received == 7  # 0 1 2 3 5 9 10
    assert counts.duplicates == 2  # 3 and 1 again
    assert counts.out_of_order == 1  # 3 after 5
    assert counts.highest == 10
    assert counts.missing() == 4  # 4 6 7 8
    assert counts.missing(sent=13) == 6  # and 11 12, which never arrived


def test_large_sequence_numbers() -> None:
    tracker = SequenceTracker()
    assert tracker.record(10_000_000)
    assert not tracker.record(10_000_000)
    assert tracker.counts().missing() == 10_000_000


# --- rate files -----------------------------------------------------------------------------------


def test_rate_file_round_trip_with_rotation(tmp_path: Path) -> None:
    rows = [(1_700_000_000_000_000 + i * 1000, 1_700_000_000_000_000 + i * 1000 + 50 + i % 7) for i in range(2500)]
    writer = RateFileWriter(tmp_path, "sender", {"role": "sender", "peer": "s1"}, rows_per_file=1000)
    for eta, ata in rows:
        writer.write(eta, ata)
    writer.close()
    assert [p.name for p in writer.paths] == ["sender-0000.csv.gz", "sender-0001.csv.gz", "sender-0002.csv.gz"]
    back = [row for path in writer.paths for row in read_rate_file(path)]
    assert back == rows
    text = gzip.decompress(writer.paths[1].read_bytes()).decode().splitlines()
    assert text[0] == "# maestro-rate v1 base_us=1700000001000000 role=sender peer=s1 part=1"
    # Row 1000 sits at base with ata 56 µs later (50 + 1000 % 7); row 1001 is 1000 µs on, and its
    # ata 50 µs after its eta (1001 % 7 == 0), so 1000 - 6 = 994 µs after row 1000's ata.
    assert text[1:4] == ["eta,ata", "0,56", "1000,994"]


def test_rate_files_are_compressed_at_zlibs_fastest_level(tmp_path: Path) -> None:
    writer = RateFileWriter(tmp_path, "sender", {})
    writer.write_many(np.arange(10_000, dtype=np.int64) * 25, np.arange(10_000, dtype=np.int64) * 25 + 7)
    writer.close()
    # A gzip member's XFL byte says how it was compressed: 4 is "fastest" (RFC 1952, 2.3.1).
    assert writer.paths[0].read_bytes()[8] == 4
    assert len(list(read_rate_file(writer.paths[0]))) == 10_000


def test_rows_written_a_burst_at_a_time_are_the_same_bytes(tmp_path: Path) -> None:
    rows = [(1_700_000_000_000_000 + i * 1000, 1_700_000_000_000_000 + i * 1000 + 50 + i % 7) for i in range(2500)]
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one = RateFileWriter(tmp_path / "one", "s", {}, rows_per_file=1000)
    many = RateFileWriter(tmp_path / "many", "s", {}, rows_per_file=1000)
    for eta, ata in rows:
        one.write(eta, ata)
    for start in range(0, 2500, 333):  # bursts across the rotations at 1000 and 2000
        burst = rows[start : start + 333]
        many.write_many(array("q", [e for e, _ in burst]), array("q", [a for _, a in burst]))
    one.close()
    many.close()
    assert [gzip.decompress(p.read_bytes()) for p in one.paths] == [gzip.decompress(p.read_bytes()) for p in many.paths]
    assert (tmp_path / "one" / "s-seconds.json").read_text() == (tmp_path / "many" / "s-seconds.json").read_text()


@pytest.mark.parametrize("seed", range(40))
def test_rows_text_is_the_format_calls_bytes(seed: int) -> None:
    """A digit a row made at once, the rest formatted: the same bytes as one f-string a row,
    for bursts of small deltas with a few others anywhere (first, last, side by side, negative,
    the 9 and 10 either side of a digit), and for rows that mostly are not small."""
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 600))
    deltas = rng.integers(0, 10, 2 * rows)
    others = rng.integers(0, 2 * rows, int(rng.integers(0, rows // 8 + 2)) if seed % 4 else 2 * rows)
    deltas[others] = rng.choice([-1, 9, 10, 99, 100, 12_345, -987_654, 1 << 40], len(others))
    if seed % 5 == 0:
        deltas[:2] = (10, -3)  # the first row an other
    if seed % 7 == 0:
        deltas[-2:] = (0, 10)  # the last row an other
    expected = "".join(f"{eta},{ata}\n" for eta, ata in zip(deltas[0::2].tolist(), deltas[1::2].tolist(), strict=True))
    assert rows_text(deltas) == expected.encode()


def test_a_rate_file_cut_by_a_crash_reads_up_to_its_last_flush(tmp_path: Path) -> None:
    writer = RateFileWriter(tmp_path, "receiver", {}, flush_every_s=0)
    for i in range(5000):
        writer.write(i * 10, i * 10 + 3)
    writer.flush()  # sync-flushed: everything so far is readable
    for i in range(5000, 5100):
        writer.write(i * 10, i * 10 + 3)
    # Simulate kill -9: the file is never closed; copy what is on disk now (once the disk
    # thread has done what it was given).
    writer.written()
    crashed = tmp_path / "crashed.csv.gz"
    crashed.write_bytes(writer.paths[0].read_bytes())
    rows = list(read_rate_file(crashed))
    assert len(rows) >= 5000
    assert rows[:5000] == [(i * 10, i * 10 + 3) for i in range(5000)]
    # The reporter's counting reader sees exactly the same rows.
    assert arrivals_per_second(crashed.read_bytes()) == Counter(ata // 1_000_000 for _, ata in rows)
    writer.close()


def test_arrivals_per_second_counts_whole_seconds_of_the_ata_column(tmp_path: Path) -> None:
    # 10 rows in second 0, 25 in second 1, 5 in second 3 (ata); etas go the other way, to no effect.
    atas = [i * 100_000 for i in range(10)] + [1_000_000 + i * 40_000 for i in range(25)] + [3_000_000] * 5
    writer = RateFileWriter(tmp_path, "receiver", {})
    for n, ata in enumerate(atas):
        writer.write(10_000_000 - n, ata)
    writer.close()
    (path,) = writer.paths
    assert arrivals_per_second(path.read_bytes()) == Counter({0: 10, 1: 25, 3: 5})
    with pytest.raises(ValueError, match="not a Maestro rate file"):
        arrivals_per_second(gzip.compress(b"eta,ata\n1,2\n"), "x.csv.gz")
    with pytest.raises(ValueError, match=r"^x.csv.gz: not a Maestro rate file \(not gzip-compressed"):
        arrivals_per_second(b"not gzip", "x.csv.gz")


def test_a_writers_piece_gives_the_rows_figures_for_any_whole_second_cut(tmp_path: Path) -> None:
    """The piece a closed writer leaves (its rows by eta second and ata second) against the
    per-row truth: across rotations, out-of-order arrivals, and arrivals stamped before their
    intended time (a receiver whose clock is behind the sender's)."""
    rows = []
    for i in range(3000):
        eta = 7_000_250_000 + i * 1_700
        rows.append((eta, eta - 400_000 + (i * 7919) % 900_000))
    writer = RateFileWriter(tmp_path, "receiver", {}, rows_per_file=800)
    for eta, ata in rows:
        writer.write(eta, ata)
    writer.close()
    assert writer.names() == [*(f"receiver-000{k}.csv.gz" for k in range(4)), "receiver-seconds.json"]
    piece = RatePiece.read(tmp_path / "receiver-seconds.json")
    assert piece.files == [f"receiver-000{k}.csv.gz" for k in range(4)]
    assert sum(count for _, _, count in piece.cells) == piece.rows == 3000
    for since in (0, 7_000_000_000, 7_002_000_000, 7_005_000_000, 7_006_000_000):
        figures = piece.seconds(since)
        assert figures.per_second == Counter(ata // 1_000_000 for eta, ata in rows if eta >= since), since
        assert (figures.first_ata_us, figures.last_ata_us, figures.rows) == (
            min(a for _, a in rows),
            max(a for _, a in rows),
            3000,
        )
    with pytest.raises(ValueError, match="whole seconds only"):
        piece.seconds(7_002_500_000)


def test_a_piece_counts_runs_of_one_cell_that_come_back(tmp_path: Path) -> None:
    """Rows nearly in order are counted by runs of one (eta second, ata second) cell; a cell
    whose run comes back later in the same write (an arrival second that alternates) adds up."""
    eta = np.arange(5_000_000, 5_000_000 + 3000 * 300, 300, dtype=np.int64)  # all in second 5
    ata = eta + np.where((np.arange(3000) // 500) % 2 == 0, 0, 1_000_000)  # runs of 500: 5, 6, 5, 6...
    written = RateFileWriter(tmp_path, "receiver", {})
    written.write_many(eta, ata)
    written.close()
    piece = RatePiece.read(written.directory / "receiver-seconds.json")
    truth = Counter((int(e) // 1_000_000, int(a) // 1_000_000) for e, a in zip(eta, ata, strict=True))
    assert {(e, a): n for e, a, n in piece.cells} == dict(truth)
    assert truth == Counter({(5, 5): 1500, (5, 6): 1500}) and piece.rows == 3000


def test_a_rotation_leaves_a_piece_for_the_files_closed_so_far(tmp_path: Path) -> None:
    """A writer killed after a rotation leaves a piece covering the closed files only: the
    summary reads the rest row by row."""
    writer = RateFileWriter(tmp_path, "sender", {}, rows_per_file=100)
    for i in range(250):
        writer.write(i * 1000, i * 1000 + 5)
    # Killed here, once its disk thread had done what it was given: never closed. Files 0 and
    # 1 were closed by rotations, file 2 is open.
    writer.written()
    piece = RatePiece.read(tmp_path / "sender-seconds.json")
    assert (piece.files, piece.rows) == (["sender-0000.csv.gz", "sender-0001.csv.gz"], 200)
    assert piece.seconds().per_second == Counter({0: 200})
    writer.close()


# --- latency --------------------------------------------------------------------------------------


def test_latency_logs_are_standard_interval_logs_with_exact_percentiles(tmp_path: Path) -> None:
    recorder = LatencyRecorder(tmp_path)
    for value in range(1, 1001):  # 1..1000 µs corrected, service a tenth of it
        recorder.record(value, max(1, value // 10))
    recorder.roll(now_s=recorder.current.start_s + 1)
    recorder.record(5_000, 400)
    recorder.close()
    assert recorder.total_corrected.get_total_count() == 1001
    # 1001 samples (1..1000, then 5000): the median is the 501st, 501; HDR with 3 digits is exact here.
    assert recorder.total_corrected.get_value_at_percentile(50) == 501
    # 5000 falls in a 4-µs-wide bucket at 3 digits; HDR reports its top, 5003.
    assert recorder.total_corrected.values_are_equivalent(recorder.total_corrected.get_max_value(), 5_000)
    # hdrh's reader may decode into one histogram object: check each interval as it is read.
    reader = HistogramLogReader(str(tmp_path / "receiver-latency.hlog"), new_histogram())
    try:
        first = reader.get_next_interval_histogram()
        assert first.get_total_count() == 1000
        assert first.get_value_at_percentile(99) == 990
        second = reader.get_next_interval_histogram()
        assert second.get_total_count() == 1
        assert second.values_are_equivalent(second.get_max_value(), 5_000)
        assert reader.get_next_interval_histogram() is None
    finally:
        reader.close()
    service = HistogramLogReader(str(tmp_path / "receiver-service-latency.hlog"), new_histogram())
    try:
        assert service.get_next_interval_histogram().get_max_value() == 100
    finally:
        service.close()


def test_out_of_range_samples_are_clamped_and_counted(tmp_path: Path) -> None:
    recorder = LatencyRecorder(tmp_path)
    recorder.record(-50, 0)  # a receiver clock behind the sender's
    recorder.record(HIGHEST_US * 2, 10)
    recorder.flush()  # samples go into the histograms a column at a time
    assert recorder.clamped == 2  # of the corrected series, the one the figures judge
    assert recorder.current.corrected.get_min_value() == 1
    assert recorder.current.service.get_min_value() == 1  # clamped alike
    recorder.close()


def test_a_receiver_behind_its_senders_is_corrected_before_anything_is_clamped(tmp_path: Path) -> None:
    # The receiver's clock is 500 ms behind: a 1 ms path reads -499 ms. Clamped first and
    # corrected after, it would read 500 ms; corrected first, it is the 1 ms it took.
    recorder = LatencyRecorder(tmp_path, shift_us=500_000)
    recorder.record_many(np.full(1000, -499_000), np.full(1000, -499_100))
    recorder.close()
    assert recorder.clamped == 0
    assert recorder.total_corrected.get_value_at_percentile(50) == 1000
    assert recorder.total_service.get_value_at_percentile(50) == 900
    assert recorder.total_corrected.get_total_count() == 1000


def test_receivers_sharing_a_stream_merge_to_exact_loss_and_duplicates() -> None:
    # Sender sent 0..9. Receiver A got 0 2 4 6 8, receiver B got 1 3 4 9 9: 4 came to both,
    # 9 twice to B, 5 and 7 to neither.
    a, b = SequenceTracker(), SequenceTracker()
    for seq in (0, 2, 4, 6, 8):
        a.record(seq)
    for seq in (1, 3, 4, 9, 9):
        b.record(seq)
    deliveries = sum(t.counts().received + t.counts().duplicates for t in (a, b))
    blobs = dump_bitsets({7: a}), dump_bitsets({7: b})
    merged = merge_bitsets([load_bitset(blob[f"{7:016x}"]) for blob in blobs], deliveries)
    assert merged.distinct == 8
    assert merged.duplicates == 2
    assert merged.lost(sent=10) == 2


def test_schedule_lag_intervals_fold_into_the_run_total() -> None:
    stats = SenderStats()
    for value_us in (10, 20, 30):
        stats.interval_lag_us.record_value(value_us)
    stats.fold()
    stats.interval_lag_us.record_value(40)
    total = stats.lag_us  # folds the open interval too
    assert total.get_total_count() == 4
    assert total.get_max_value() == 40
    assert total.get_value_at_percentile(50) == 20
    assert stats.interval_lag_us.get_total_count() == 0


def test_each_interval_holds_only_its_own_samples_though_their_histograms_are_reused() -> None:
    recorder = LatencyRecorder(None)
    intervals = []
    for n in (3, 2, 5, 1):
        for _ in range(n):
            recorder.record(1000 * n, 500)
        done = recorder.roll()
        # What roll returned is intact until the next roll, whatever the reuse.
        assert done.corrected.get_total_count() == done.service.get_total_count() == n
        assert done.corrected.get_max_value() == pytest.approx(1000 * n, rel=0.01)  # no earlier interval's
        intervals.append(done)
    assert recorder.total_corrected.get_total_count() == 11
    assert intervals[2] is intervals[0]  # two pairs of histograms alternate, none is allocated


def test_rate_seconds_agrees_with_the_rows_one_by_one(tmp_path: Path) -> None:
    """The summary's vectorised reading against the per-row truth: warm-up cut by eta, counts
    by ata second, first and last ata, rows; across a rotation and out-of-order arrivals."""
    writer = RateFileWriter(tmp_path, "receiver", {}, rows_per_file=700)
    for i in range(2000):
        eta = 5_000_000 + i * 1_500
        writer.write(eta, eta + 200 + (i * 7919) % 50_000)  # arrivals out of order
    writer.close()
    assert len(writer.paths) == 3
    for path in writer.paths:
        rows = list(read_rate_file(path))
        since = 6_000_000
        part = rate_seconds(path.read_bytes(), str(path), since_us=since)
        assert part.per_second == Counter(ata // 1_000_000 for eta, ata in rows if eta >= since)
        assert (part.first_ata_us, part.last_ata_us, part.rows) == (
            min(a for _, a in rows),
            max(a for _, a in rows),
            len(rows),
        )


@pytest.mark.parametrize("seed", range(60))
def test_a_burst_recorded_at_once_counts_as_one_by_one(seed: int) -> None:
    """record_many over bursts against record over the same arrivals: duplicates (within a burst
    and across), gaps and disorder give the same firsts, counts and bits."""
    rng = random.Random(seed)
    arrivals = [rng.randint(0, rng.choice([10, 100, 5000])) for _ in range(rng.randint(0, 3000))]
    one, many = SequenceTracker(), SequenceTracker()
    firsts: list[bool] = []
    start = 0
    while start < len(arrivals):
        burst = arrivals[start : start + rng.randint(1, 300)]
        firsts += many.record_many(np.array(burst, dtype=np.int64)).tolist()
        start += len(burst)
    assert firsts == [one.record(sequence) for sequence in arrivals]
    assert many.counts() == one.counts()
    assert many.bitset.rstrip(b"\0") == one.bitset.rstrip(b"\0")  # a burst grows the bitset at once


@pytest.mark.parametrize("seed", range(40))
def test_bursts_in_order_recorded_at_once_count_as_one_by_one(seed: int) -> None:
    """The in-order bursts record_many takes a shorter way with (a run after everything seen
    so far; a run reaching back among numbers seen already; a sparse run), against record."""
    rng = random.Random(seed)
    one, many = SequenceTracker(), SequenceTracker()
    arrivals: list[int] = []
    firsts: list[bool] = []
    highest = -1
    for _ in range(rng.randint(1, 40)):
        low = rng.choice([highest + 1, highest + rng.randint(1, 50), max(0, highest - rng.randint(0, 200))])
        spread = rng.choice([1, 1, 3, 200])  # 200: far apart, past the dense packing's reach
        burst = sorted(rng.sample(range(low, low + spread * 300), rng.randint(1, 300)))
        firsts += many.record_many(np.array(burst, dtype=np.int64)).tolist()
        arrivals += burst
        highest = max(highest, burst[-1])
    assert firsts == [one.record(sequence) for sequence in arrivals]
    assert many.counts() == one.counts()
    assert many.bitset.rstrip(b"\0") == one.bitset.rstrip(b"\0")


def test_a_burst_with_a_repeat_or_reaching_back_to_the_highest_is_no_run_of_firsts() -> None:
    tracker = SequenceTracker()
    assert tracker.record_many(np.array([5, 5], dtype=np.int64)).tolist() == [True, False]
    assert tracker.record_many(np.array([5, 6], dtype=np.int64)).tolist() == [False, True]
    assert tracker.counts() == SequenceCounts(received=2, duplicates=2, out_of_order=0, highest=6)
    nothing = tracker.record_many(np.empty(0, dtype=np.int64))
    assert nothing.dtype == bool and len(nothing) == 0
    assert tracker.record_many(np.array([7, 8], dtype=np.int64)).dtype == bool


def test_a_bitset_grows_as_record_grows_it() -> None:
    # To the byte needed, and at least double what it had: as long as `record` makes it.
    tracker = SequenceTracker()
    tracker.record_many(np.arange(16, dtype=np.int64))
    assert len(tracker.bitset) == 2
    tracker.record_many(np.array([15], dtype=np.int64))
    assert len(tracker.bitset) == 2
    tracker.record_many(np.array([40], dtype=np.int64))
    assert len(tracker.bitset) == 6  # 2 + max(6 - 2, 2)
    one = SequenceTracker()
    for sequence in [*range(16), 15, 40]:
        one.record(sequence)
    assert one.bitset == tracker.bitset


def test_a_burst_of_any_integer_columns_records_as_int64() -> None:
    wide, narrow = LatencyRecorder(None), LatencyRecorder(None)
    values = np.array([1, 900, 70_000, 2_000_000], dtype=np.int64)
    wide.record_many(values, values // 2)
    narrow.record_many(values.astype(np.int32), (values // 2).astype(np.uint32))
    assert narrow.corrected_us == wide.corrected_us == array("q", values.tolist())
    assert narrow.service_us == wide.service_us == array("q", (values // 2).tolist())


def test_samples_go_into_the_histograms_once_65536_are_held() -> None:
    recorder = LatencyRecorder(None)
    recorder.record_many(np.full(65_535, 7, np.int64), np.full(65_535, 3, np.int64))
    assert len(recorder.corrected_us) == 65_535 and recorder.current.corrected.get_total_count() == 0
    recorder.record(7, 3)
    assert len(recorder.corrected_us) == len(recorder.service_us) == 0
    assert recorder.current.corrected.get_total_count() == recorder.current.service.get_total_count() == 65_536
    recorder.record_many(np.full(65_536, 7, np.int64), np.full(65_536, 3, np.int64))
    assert len(recorder.corrected_us) == 0 and recorder.current.service.get_total_count() == 131_072


def test_due_times_at_a_rate_whose_interval_is_no_whole_nanosecond() -> None:
    # 3/s from 1000 ns: intended 1000, 333,334,333.3, 666,667,666.7, 1,000,001,000 ns (floored).
    schedule = Schedule(rate_per_s=3, start_ns=1000)
    assert schedule.interval_ns == 1e9 / 3
    assert schedule.take_due(1000 + 10**9, before_ns=2**62, most=10) == [1000, 333_334_333, 666_667_666, 1_000_001_000]
    assert schedule.scheduled == 4
    # Woken early enough only counts from the exact intended time: 333,334,333.3 is not due
    # at 333,334,333, nor before it.
    again = Schedule(rate_per_s=3, start_ns=1000)
    assert again.take_due(1000, before_ns=2**62, most=10, early_ns=333_333_333) == [1000]
    assert again.take_due(1000, before_ns=2**62, most=10, early_ns=333_333_334) == [333_334_333]
    bounded = Schedule(rate_per_s=3, start_ns=1000)
    assert bounded.take_due(10**10, before_ns=333_334_333, most=10) == [1000]
    assert bounded.take_due(10**10, before_ns=333_334_334, most=10) == [333_334_333]
    # A million seconds on, from the start rather than by adding up intervals: still exact.
    far = Schedule(rate_per_s=3, start_ns=1000)
    far._sent = 3_000_000
    assert far.next_intended(now_ns=0) == 1000 + 10**15
    assert far.take_due(2 * 10**15, before_ns=2**62, most=2) == [
        1000 + 10**15 + 333_333_333,
        1000 + 10**15 + 666_666_666,
    ]


def test_an_unbounded_schedule_takes_as_many_as_asked_all_now() -> None:
    schedule = Schedule(rate_per_s=0, start_ns=0)
    assert schedule.interval_ns == 0.0
    assert schedule.take_due(77, before_ns=0, most=3) == [77, 77, 77]
    assert schedule.next_intended(now_ns=78) == 78
    assert schedule.scheduled == 4
    assert schedule.take_due(77, before_ns=2**62, most=-1) == [] and schedule.scheduled == 4
    with pytest.raises(ValueError, match="rate_per_s must be >= 0"):
        Schedule(rate_per_s=-1, start_ns=0)


def test_poisson_due_times_stop_at_the_wake_up_the_bound_and_most() -> None:
    expected = Schedule(1000, 0, poisson=True, seed=3)
    times = [expected.next_intended(0) for _ in range(6)]
    assert times[0] == 0 and times == sorted(times) and len(set(times)) == 6
    # Drawn times have fractions of a ns, floored as they are handed out: one is due a ns on.
    schedule = Schedule(1000, 0, poisson=True, seed=3)
    assert schedule.take_due(times[2], before_ns=2**62, most=10) == times[:2]
    assert schedule.take_due(times[2] + 1, before_ns=2**62, most=10) == [times[2]]
    assert schedule.take_due(times[3] - 1, before_ns=2**62, most=10, early_ns=2) == [times[3]]
    assert schedule.take_due(10**12, before_ns=times[5], most=10) == [times[4]]
    assert schedule.take_due(10**12, before_ns=2**62, most=1) == [times[5]]
    assert schedule.scheduled == 6


def test_a_bound_at_or_before_what_was_taken_takes_nothing_and_moves_nothing() -> None:
    schedule = Schedule(rate_per_s=1000, start_ns=0)
    assert schedule.take_due(10**10, before_ns=1_000_000, most=10) == [0]
    # The next is intended at 1 ms exactly, which a bound of 1 ms leaves out; one of 0.5 ms
    # (before what was taken already, as a profile's next step may be) takes nothing either.
    assert schedule.take_due(10**10, before_ns=1_000_000, most=10) == []
    assert schedule.take_due(10**10, before_ns=500_000, most=10) == []
    assert schedule.scheduled == 1
    unbounded = Schedule(rate_per_s=0, start_ns=0)
    unbounded.take_due(5, before_ns=0, most=2)
    unbounded.take_due(5, before_ns=0, most=3)
    assert unbounded.scheduled == 5


def test_poisson_bounds_fall_on_the_first_intended_time_exactly() -> None:
    # The first message is intended at the start itself: due at it, and not before a bound at it.
    assert Schedule(1000, 0, poisson=True, seed=3).take_due(0, before_ns=2**62, most=5) == [0]
    assert Schedule(1000, 0, poisson=True, seed=3).take_due(0, before_ns=0, most=5) == []


def test_poisson_times_are_the_seeded_draws_added_up_in_nanoseconds() -> None:
    rng = random.Random(9)
    expected, at = [], 5.0
    for _ in range(20_000):
        expected.append(int(at))
        at += rng.expovariate(1000) * 1e9
    schedule = Schedule(1000, 5, poisson=True, seed=9)
    assert schedule.take_due(10**12, before_ns=2**62, most=20_000) == expected


def test_an_interval_is_stamped_with_its_start_and_end_and_its_max_in_ms(tmp_path: Path) -> None:
    recorder = LatencyRecorder(tmp_path)
    start_s = recorder.current.start_s
    recorder.record(5000, 2000)
    done = recorder.roll(now_s=start_s + 2.5)
    assert done.corrected.get_start_time_stamp() == int(start_s * 1000)
    assert done.corrected.get_end_time_stamp() == int((start_s + 2.5) * 1000)
    recorder.close()
    line = next(
        text
        for text in (tmp_path / "receiver-latency.hlog").read_text().splitlines()
        if text[:1].isdigit() and "," in text
    )
    # StartTimestamp, Interval_Length, Interval_Max (ms: the µs values / 1000), the histogram.
    assert [float(field) for field in line.split(",")[1:3]] == [2.5, 5.0]


def test_bitsets_unite_byte_by_byte_to_the_longest() -> None:
    # Byte i holds sequences 8i..8i+7, lowest bit first: {0} and {9} make {0, 9}.
    assert union_bitsets([b"\x01", b"\x00\x02"]) == b"\x01\x02"
    assert union_bitsets([]) == b""
    assert merge_bitsets([b"\x01", b"\x00\x02", b"\x01"], deliveries=4) == MergedCounts(distinct=2, duplicates=2)


def test_a_latency_log_opens_with_its_series_and_its_utc_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # the stamp is UTC's, whatever the host's zone
    time.tzset()
    try:
        before = time.time()
        recorder = LatencyRecorder(tmp_path / "not" / "yet")  # folders made as needed
        start = recorder.current.start_s
        recorder.close()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert before - 0.001 <= start <= time.time() and (start * 1000) == pytest.approx(round(start * 1000), abs=1e-3)
    head = (tmp_path / "not" / "yet" / "receiver-latency.hlog").read_text().splitlines()
    stamp = datetime.fromtimestamp(start, UTC).isoformat(sep=" ")
    assert head[0] == "#[maestro corrected latency, microseconds]"
    assert f"#[StartTime: {start:.3f} (seconds since epoch), {stamp}]" in head
    assert "+00:00" in stamp


def test_a_service_latency_below_zero_is_kept_until_it_is_clamped() -> None:
    recorder = LatencyRecorder(None)
    recorder.flush()
    recorder.record(-5, -7)  # a receiver's clock behind its sender's, not yet corrected
    recorder.flush()
    assert recorder.clamped == 1 and recorder.current.service.get_total_count() == 1

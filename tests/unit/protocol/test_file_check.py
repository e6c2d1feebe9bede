"""A peer's files are read as it wrote them or not at all: each damage says which file and what
it lacks, and no damage at all, at random, gives figures from part of a file without an error."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.synthetic import T0_US, edit_peer_json, one_loss_one_duplicate

from protocol.file_check import DamagedFileError, check_file, check_files
from protocol.ratefile import RateFileWriter
from protocol.results import read_peer_json
from reports.summary import read_peers, summarize


def test_a_rate_files_check_has_its_rows_bytes_and_sha256(tmp_path: Path) -> None:
    writer = RateFileWriter(tmp_path, "sender", {}, flush_every_s=0)
    for i in range(250):
        writer.write(T0_US + i * 1000, T0_US + i * 1000 + 7)
    writer.close()
    (name,) = [n for n in writer.names() if n.endswith(".csv.gz")]
    check = check_file(tmp_path / name)
    assert check.rows == 250 and check.bytes == (tmp_path / name).stat().st_size and len(check.sha256) == 64
    assert check_files(tmp_path, [name, "never-written.csv.gz"]) == {name: check}  # a file never written has none


def test_a_latency_logs_check_counts_its_intervals(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    log = test / "receiver" / "r1" / "receiver-latency.hlog"
    intervals = [line for line in log.read_text().splitlines() if line[:1].isdigit()]
    assert check_file(log).rows == len(intervals) >= 1


@pytest.fixture
def cut_rate_file(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A receiver's rate file of 200 rows, and the size it had when its first 100 were flushed."""
    test = one_loss_one_duplicate(tmp_path)
    directory = test / "receiver" / "r1"
    for old in directory.glob("receiver*"):
        if old.name.endswith((".csv.gz", "-seconds.json")):
            old.unlink()
    writer = RateFileWriter(directory, "receiver", {}, flush_every_s=0)
    for i in range(100):
        writer.write(T0_US + i * 10_000, T0_US + i * 10_000 + 500)
    writer.flush()
    writer.written()
    (path,) = writer.paths
    half = path.stat().st_size
    for i in range(100, 200):
        writer.write(T0_US + i * 10_000, T0_US + i * 10_000 + 500)
    writer.close()
    edit_peer_json(directory / "peer.json", lambda info: info.update(files=writer.names()))
    yield path, half


def test_a_rate_file_cut_short_is_named_with_what_it_lacks(cut_rate_file: tuple[Path, int]) -> None:
    path, half = cut_rate_file
    test = path.parents[2]
    whole = path.stat().st_size
    path.write_bytes(path.read_bytes()[:half])
    with pytest.raises(DamagedFileError) as caught:
        read_peers(test)
    assert str(caught.value) == (f"receiver r1: {path.name} is cut short: 100 of 200 rows, {half:,} of {whole:,} bytes")
    with pytest.raises(DamagedFileError):
        summarize(test)


def test_a_corrupt_or_missing_file_is_named(cut_rate_file: tuple[Path, int]) -> None:
    path, _ = cut_rate_file
    test = path.parents[2]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match=rf"^receiver r1: {path.name} is corrupt: .*another SHA-256$"):
        read_peers(test)
    path.unlink()
    with pytest.raises(DamagedFileError, match=rf"^receiver r1: {path.name} is missing"):
        read_peers(test)


def test_a_digit_changed_in_peer_json_is_found(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    path = test / "sender" / "s1" / "peer.json"
    assert read_peer_json(path).sender is not None
    path.write_text(path.read_text().replace('"sent": 40', '"sent": 41'))
    with pytest.raises(DamagedFileError, match=r"peer.json: changed since it was written"):
        read_peer_json(path)


def test_damage_to_several_files_names_the_first_and_counts_the_rest(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    for receiver in ("r1", "r2"):
        (test / "receiver" / receiver / "receiver-latency.hlog").write_text("")
    with pytest.raises(DamagedFileError, match=r"^receiver r1: receiver-latency.hlog is cut short: .* \(and 1 more"):
        read_peers(test)


# --- the fuzz --------------------------------------------------------------------------------

_PRISTINE = Path(tempfile.mkdtemp(prefix="maestro-fuzz-"))
_TEST = one_loss_one_duplicate(_PRISTINE)
_FILES = sorted(str(p.relative_to(_TEST)) for p in _TEST.rglob("*") if p.is_file())
_INTACT = summarize(_TEST)


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, str, int, int]:
    name = draw(st.sampled_from(_FILES))
    size = (_TEST / name).stat().st_size
    how = draw(st.sampled_from(["cut", "flip", "append"]))
    return name, how, draw(st.integers(0, max(0, size - 1))), draw(st.integers(1, 255))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damage())
def test_no_reader_returns_figures_from_a_damaged_file_without_an_error(hurt: tuple[str, str, int, int]) -> None:
    """Any one file of a test folder (rate files, pieces, latency logs, sequence bitsets,
    peer.json) cut, with a byte changed, or with bytes appended: the figures are the intact
    ones (the damage changed nothing they depend on) or a ValueError names the file."""
    name, how, at, value = hurt
    with tempfile.TemporaryDirectory() as scratch:
        test = Path(scratch) / "t1"
        shutil.copytree(_TEST, test)
        path = test / name
        data = bytearray(path.read_bytes())
        if how == "cut":
            data = data[:at]
        elif how == "flip":
            data[at] ^= value
        else:
            data += bytes([value]) * value
        path.write_bytes(bytes(data))
        try:
            figures = summarize(test)
        except ValueError as exc:
            assert path.name in str(exc), f"{how} {name} at {at}: {exc}"
            return
        assert figures == _INTACT, f"{how} {name} at {at}: figures from a damaged file, without an error"

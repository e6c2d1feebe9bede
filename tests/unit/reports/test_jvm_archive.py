"""The Spark driver JVM's class-data archive: made once under a name of its own, adopted by a
later start only when whole and no longer being written, mapped after that."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.process_table import processes_naming
from reports import jvm_archive
from reports.jvm_archive import archive_options

MAGIC = bytes.fromhex("a8ab0bf0")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A java of its own (JAVA_HOME) and an empty cache."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    return tmp_path / "cache"


def _part(cache: Path, options: list[str]) -> Path:
    (option,) = [o for o in options if o.startswith("-XX:ArchiveClassesAtExit=")]
    return Path(option.split("=", 1)[1])


def test_the_first_start_has_its_jvm_write_an_archive_of_its_own_quietly(cache: Path) -> None:
    options = archive_options(cache)
    part = _part(cache, options)
    assert part.parent == cache and part.name.endswith(f".{os.getpid()}.part")
    assert "-Xlog:cds=off" in options and "-Xlog:cds+dynamic=off" in options


def test_a_whole_part_that_nobody_writes_becomes_the_archive_and_is_mapped(cache: Path) -> None:
    part = _part(cache, archive_options(cache))
    part.write_bytes(MAGIC + bytes(100))
    options = archive_options(cache)
    archive = part.with_name(part.name.split(".")[0] + ".jsa")
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    assert archive.read_bytes() == MAGIC + bytes(100) and not part.exists()
    assert archive_options(cache)[0] == options[0]  # and by every start after


def test_a_part_cut_off_by_a_killed_jvm_is_deleted_and_another_made(cache: Path) -> None:
    # HotSpot writes the header (and its magic number) after the regions: a cut-off part has none.
    part = _part(cache, archive_options(cache))
    cut = part.with_name(part.name.replace(f".{os.getpid()}.", ".1."))
    cut.write_bytes(bytes(4096))
    options = archive_options(cache)
    assert not cut.exists()
    assert _part(cache, options) == part  # a new one, this start's


@pytest.fixture
def being_written(cache: Path) -> Iterator[Path]:
    """A whole part that a running process names on its command line, as the JVM that writes it
    does until it has finished."""
    ours = _part(cache, archive_options(cache))
    part = ours.with_name(ours.name.replace(f".{os.getpid()}.", ".7."))
    part.write_bytes(MAGIC + bytes(100))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"-XX:ArchiveClassesAtExit={part}"])
    try:
        while not processes_naming(str(part)):  # until exec: a forked child shows its parent's
            time.sleep(0.01)
        yield part
    finally:
        proc.kill()
        proc.wait()


def test_a_part_still_being_written_is_left_alone(cache: Path, being_written: Path) -> None:
    options = archive_options(cache)
    assert being_written.exists()
    assert _part(cache, options).name.endswith(f".{os.getpid()}.part")  # no archive yet: this start makes its own


def test_no_archive_off_linux_or_where_the_launcher_would_split_the_path(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert archive_options(tmp_path / "a cache") == []
    monkeypatch.setattr(jvm_archive.sys, "platform", "darwin")
    assert archive_options(cache) == []

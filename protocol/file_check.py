"""What a peer's files held when it finished with them, and the check of a copy against that.

A peer closes its rate files and latency logs, then writes `peer.json`, and in it each file's
bytes, SHA-256 and, for a rate file or a latency log, its rows (a rate file's `eta,ata` rows, a
log's intervals): a `FileCheck`. The uploader sends that SHA-256, not one taken from the file as
it is then, so the data server refuses a copy that is not what the peer wrote; the reporter
checks every file again before it reads one. A file cut short or changed says which file and
what is missing, in one line: a report is never built from part of a file without a word.

The figures are taken from the closed files rather than as the writers go: one place for every
kind of file a peer leaves (the rate files of its child processes too), off the hot path. A
sender's 1,000,000 rows take ~1 MB compressed and ~10 ms to check.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.json_value import JsonObject

__all__ = ["DamagedFileError", "FileCheck", "check_file", "check_files", "rows_of", "verify_file"]


class DamagedFileError(ValueError):
    """A file that is not what its peer recorded: one line naming it and what is missing."""


@dataclass(frozen=True)
class FileCheck:
    bytes: int
    sha256: str
    rows: int | None = None  # a rate file's rows, a latency log's intervals; None for other files

    def to_json(self) -> JsonObject:
        return {"bytes": self.bytes, "rows": self.rows, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileCheck:
        rows = data.get("rows")
        return cls(int(data["bytes"]), str(data["sha256"]), None if rows is None else int(rows))


def rows_of(name: str, data: bytes) -> int | None:
    """A rate file's whole rows (its lines but the two of its header), a latency log's
    intervals (its lines but comments and the legend); None for any other file. What a stream
    cut short or corrupt still yields is counted: what a damaged copy has left."""
    if name.endswith(".csv.gz"):
        try:
            text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            return 0
        return max(0, text.count(b"\n") - 2)
    if name.endswith(".hlog"):
        lines = data.split(b"\n")
        return sum(1 for line in lines if line and not line.startswith((b"#", b'"StartTimestamp"')))
    return None


def check_file(path: Path) -> FileCheck:
    data = path.read_bytes()
    return FileCheck(len(data), hashlib.sha256(data).hexdigest(), rows_of(path.name, data))


def check_files(directory: Path, names: Iterable[str]) -> dict[str, FileCheck]:
    """The checks of the named files of a peer's folder that exist (a file a crash never wrote
    has none to be held to)."""
    return {name: check_file(directory / name) for name in names if (directory / name).is_file()}


def verify_file(path: Path, check: FileCheck, owner: str) -> None:
    """A DamagedFileError naming `owner`'s file and what differs, unless it is as recorded."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(f"{owner}: {path.name} is missing ({exc.strerror or exc})") from exc
    if len(data) == check.bytes and hashlib.sha256(data).hexdigest() == check.sha256:
        return
    rows = rows_of(path.name, data)
    unit = "intervals" if path.name.endswith(".hlog") else "rows"
    has = f"{rows:,} of {check.rows:,} {unit}, " if rows is not None and check.rows not in (None, rows) else ""
    if len(data) < check.bytes:
        what = f"is cut short: {has}{len(data):,} of {check.bytes:,} bytes"
    else:
        what = f"is corrupt: {has}{len(data):,} bytes where {check.bytes:,} were written, another SHA-256"
    raise DamagedFileError(f"{owner}: {path.name} {what}")

"""One CSV per data set: a W3C (ISO 8601, UTC) `timestamp` column first, then the set's columns
as its first row names them. Each row is flushed, so a crash loses at most the row in hand."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

__all__ = ["DataSetWriter"]


class DataSetWriter:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.rows = 0
        self._file: IO[str] = path.open("w", newline="")
        self._writer: csv.DictWriter[str] | None = None

    def write(self, row: Mapping[str, object], when: datetime | None = None) -> None:
        stamp = (when or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        record = {"timestamp": stamp, **row}
        if self._writer is None:
            # Columns fixed by the first row; a later row's extra keys are dropped, missing ones empty.
            self._writer = csv.DictWriter(self._file, fieldnames=list(record), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow(record)
        self._file.flush()
        self.rows += 1

    def close(self) -> None:
        self._file.close()

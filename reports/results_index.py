"""The results index: every test.json under a results folder, as a row of a database, so that a
history, the data server and a nightly gate ask a database instead of reading every folder.

SQLite in a file beside the results by default (`RESULTS/.maestro-index.sqlite3`: embedded,
nothing to start); PostgreSQL with a `postgresql://` URL (psycopg 3). The schema is Alembic's
(reports/index_migrations), brought to its newest revision whenever an index is opened.

The files stay the truth. The index is brought up to date from them each time it is read
(`sync`): a test.json whose size or modification time differs from its row's is read again, and
a row whose folder is gone is dropped. So a run is in the index as soon as the coordinator has
stored its test.json on the data server, whoever reads next, with no hook in the coordinator;
`maestro index RESULTS` (`rebuild`) reads every file again.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

from protocol.json_value import JsonObject
from protocol.test_record import TestRecord
from reports.history import FIGURES, Run, facts_of, run_of
from reports.history import distribution_from as _distribution
from reports.paths import result_dirs
from reports.run_facts import inspected_version, started_utc
from reports.summary import read_test_record

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_INDEX_FILE", "VERSION_TABLE", "IndexStats", "ResultsIndex", "ResultsIndexError", "index_row"]

DEFAULT_INDEX_FILE = ".maestro-index.sqlite3"  # hidden: not a test's folder to the data server
VERSION_TABLE = "maestro_index_version"
_MIGRATIONS = Path(__file__).parent / "index_migrations"

_metadata = sa.MetaData()
# The table as the newest migration leaves it (reports/index_migrations/versions).
RUNS = sa.Table(
    "maestro_runs",
    _metadata,
    sa.Column("results_root", sa.Text, primary_key=True),
    sa.Column("test_id", sa.String(200), primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("phase_of", sa.String(200)),
    sa.Column("finished", sa.Boolean, nullable=False),
    sa.Column("started", sa.String(40)),
    sa.Column("ended", sa.String(40)),
    sa.Column("kind", sa.String(40)),
    sa.Column("outcome", sa.String(20)),
    sa.Column("reason", sa.Text),
    sa.Column("generator_bound", sa.Boolean, nullable=False),
    sa.Column("workload_hash", sa.String(16), nullable=False),
    sa.Column("testbed_hash", sa.String(16), nullable=False),
    sa.Column("sut_kind", sa.String(40), nullable=False),
    sa.Column("sut_version", sa.Text, nullable=False),
    sa.Column("client_libraries", sa.JSON, nullable=False),
    sa.Column("testbed", sa.JSON, nullable=False),
    sa.Column("sent", sa.BigInteger),
    sa.Column("received", sa.BigInteger),
    sa.Column("lost", sa.BigInteger),
    sa.Column("duplicates", sa.BigInteger),
    *(sa.Column(fig.key, sa.Float) for fig in FIGURES),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("record_bytes", sa.BigInteger, nullable=False),
    sa.Column("record_mtime_ns", sa.BigInteger, nullable=False),
    sa.Column("latency_distribution", sa.JSON),  # [[percentile, µs], ...] (revision 0002)
    sa.Column("latency_untrusted", sa.Text),  # why its latency is no figure (revision 0004)
)


class ResultsIndexError(Exception):
    """The index cannot be opened or written: a bad URL, a database out of reach, a driver missing."""


@dataclass(frozen=True)
class IndexStats:
    read: int  # test.json files read (new or changed)
    dropped: int  # rows whose folder is gone
    rows: int  # rows of this results folder now
    # Folders whose test.json could not be read (being written, or damaged), with its mtime (ns).
    unreadable: tuple[tuple[str, int], ...] = ()


def index_row(record: TestRecord, test_dir: Path, size: int, mtime_ns: int) -> JsonObject:
    """A test.json as its row. A run without figures (still running, a phase's parent) has a row
    too, `finished` false, so that the next sync does not read it again until it changes. A
    test.json in a folder of another name is a copy of that test's (a folder copied by hand): not
    a run of its own, which would count one night as several."""
    run = run_of(record) if record.test_id in ("", test_dir.name) else None
    if run is None and record.test_id not in ("", test_dir.name):
        log.warning("test %s left out: its test.json is test %s's (a copy?)", test_dir.name, record.test_id)
    figures = record.summary if record.summary is not None and record.summary.error is None else None
    facts = facts_of(record)
    if not facts["sut_version"]:  # not stated by the script: as an inspector read it, if one did
        facts["sut_version"] = inspected_version(test_dir)
    counts = {
        key: None if figures is None else getattr(figures, key) for key in ("sent", "received", "lost", "duplicates")
    }
    return {
        "results_root": str(test_dir.parent),
        "test_id": test_dir.name,
        "name": record.name or None,
        "phase_of": record.phase_of,
        "finished": run is not None,
        "started": started_utc(record),
        "ended": (record.end or "")[:40] or None,
        "kind": record.kind or None,
        "outcome": record.outcome,
        "reason": record.reason,
        "generator_bound": bool(run and run.generator_bound),
        "workload_hash": run.workload if run else "",
        "testbed_hash": run.testbed if run else "",
        **facts,
        **counts,
        **{fig.key: (run.figures.get(fig.key) if run else None) for fig in FIGURES},
        "path": str(test_dir),
        "record_bytes": size,
        "record_mtime_ns": mtime_ns,
        "latency_distribution": [list(point) for point in run.distribution] if run else None,
        "latency_untrusted": run.latency_untrusted if run else None,
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _run_of_row(row: Any) -> Run:
    return Run(
        test_id=row.test_id,
        started=row.started or "",
        outcome=row.outcome or "unknown",
        figures={fig.key: getattr(row, fig.key) for fig in FIGURES},
        generator_bound=bool(row.generator_bound),
        reason=row.reason,
        workload=row.workload_hash,
        testbed=row.testbed_hash,
        distribution=_distribution(row.latency_distribution),
        latency_untrusted=row.latency_untrusted,
    )


class ResultsIndex:
    """One results folder's runs in a database (several folders may share one database)."""

    def __init__(self, root: Path, url: str | None = None) -> None:
        self.root = root.resolve()
        self.url = url or f"sqlite:///{self.root / DEFAULT_INDEX_FILE}"
        self._engine = _engine(self.url)
        with self._connect() as connection:
            _migrate(connection)

    @property
    def shown_url(self) -> str:
        """The URL without its password, as it may be printed."""
        return _safe(self.url)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> ResultsIndex:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def sync(self) -> IndexStats:
        """Read again every test.json that changed since it was indexed; drop the rows of
        folders gone."""
        with self._connect() as connection:
            known = {
                row.test_id: (row.record_bytes, row.record_mtime_ns)
                for row in connection.execute(
                    sa.select(RUNS.c.test_id, RUNS.c.record_bytes, RUNS.c.record_mtime_ns).where(self._mine)
                )
            }
            return self._index(connection, known)

    def rebuild(self) -> IndexStats:
        """Every test.json read again: the rows of this folder made anew from the files."""
        with self._connect() as connection:
            connection.execute(sa.delete(RUNS).where(self._mine))
            return self._index(connection, {})

    def runs(self, name: str) -> list[Run]:
        """Every finished run named `name`, oldest first (as reports.history.read_runs)."""
        query = (
            sa.select(RUNS)
            .where(self._mine, RUNS.c.name == name, RUNS.c.finished)  # finished: run_of made it a run
            .order_by(RUNS.c.started, RUNS.c.test_id)
        )
        with self._connect() as connection:
            return [_run_of_row(row) for row in connection.execute(query)]

    def names(self) -> list[str]:
        """The names of the tests with a finished run, for links to their histories."""
        query = (
            sa.select(RUNS.c.name)
            .where(self._mine, RUNS.c.finished, RUNS.c.name.is_not(None))
            .distinct()
            .order_by(RUNS.c.name)
        )
        with self._connect() as connection:
            return [row.name for row in connection.execute(query) if row.name]

    def row(self, test_id: str) -> JsonObject | None:
        with self._connect() as connection:
            found = connection.execute(sa.select(RUNS).where(self._mine, RUNS.c.test_id == test_id)).first()
        return dict(found._mapping) if found else None

    @property
    def _mine(self) -> sa.ColumnElement[bool]:
        return RUNS.c.results_root == str(self.root)

    def _index(self, connection: Connection, known: dict[str, tuple[int, int]]) -> IndexStats:
        read = 0
        seen = set()
        unreadable = []
        for test_dir, size, mtime_ns in _records(self.root):
            seen.add(test_dir.name)
            if known.get(test_dir.name) == (size, mtime_ns):
                continue
            record = read_test_record(test_dir)
            if record is None:  # being written, or damaged: read again at the next sync
                unreadable.append((test_dir.name, mtime_ns))
                continue
            connection.execute(sa.delete(RUNS).where(self._mine, RUNS.c.test_id == test_dir.name))
            connection.execute(sa.insert(RUNS).values(index_row(record, test_dir, size, mtime_ns)))
            read += 1
        gone = set(known) - seen
        if gone:
            connection.execute(sa.delete(RUNS).where(self._mine, RUNS.c.test_id.in_(sorted(gone))))
        rows = connection.execute(sa.select(sa.func.count()).select_from(RUNS).where(self._mine)).scalar_one()
        return IndexStats(read, len(gone), int(rows), tuple(unreadable))

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        try:
            with self._engine.begin() as connection:
                yield connection
        except sa.exc.SQLAlchemyError as exc:
            raise ResultsIndexError(f"results index {_safe(self.url)}: {_first_line(exc)}") from exc


def _engine(url: str) -> Engine:
    """An engine for `url`; `postgresql://` goes through psycopg 3 (SQLAlchemy's default for it
    is psycopg2, which we do not install)."""
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    try:
        if url.startswith("sqlite"):
            # Several readers (the data server, a nightly job) may sync at once: wait for the lock.
            return sa.create_engine(url, connect_args={"timeout": 30})
        return sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise ResultsIndexError(f"results index {_safe(url)}: {_first_line(exc)}") from exc
    except ModuleNotFoundError as exc:
        raise ResultsIndexError(
            f"results index {_safe(url)}: its driver {exc.name} is not installed (pip install 'maestro-py[postgresql]')"
        ) from exc


def _migrate(connection: Connection) -> None:
    """The schema at Alembic's newest revision, in the caller's transaction."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _records(root: Path) -> Iterator[tuple[Path, int, int]]:
    """Each test's folder with its test.json's size and modification time (ns)."""
    for test_dir in result_dirs(root):
        try:
            stat = os.stat(test_dir / "test.json", follow_symlinks=False)
        except OSError:
            continue
        yield test_dir, stat.st_size, stat.st_mtime_ns


def _safe(url: str) -> str:
    """The URL as it may be printed: no password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url.rsplit("@", maxsplit=1)[-1]


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

"""The results index in real databases, and the nightly gate as a nightly job runs it: SQLite
beside the results and PostgreSQL on 127.0.0.1:5432 (each test in a schema of its own, dropped
after), and `maestro history --gate` as a process for each verdict."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from support.synthetic import history_run

from protocol.codes import ExitCode
from reports import results_index
from reports.results_index import DEFAULT_INDEX_FILE, ResultsIndex, ResultsIndexError

NAME = "nightly rabbitmq"
# Median 10,002.5, MAD 7.5: sigma 0.11 %, and the gate's band over 6 runs (15.6 sigmas) ±1.7 %.
NIGHTS = (10_000.0, 10_015.0, 9_990.0, 10_005.0, 9_995.0, 10_010.0)
PG = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The real PostgreSQL, in a schema of this test's own."""
    schema = f"maestro_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL does not answer on 127.0.0.1:5432: {exc}")
    with admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield f"{PG}?options=-csearch_path%3D{schema}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _maestro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "maestro"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def _nights(root: Path, last: float | None, nights: tuple[float, ...] = NIGHTS, **last_run: object) -> None:
    for n, rate in enumerate(nights):
        history_run(root, NAME, n, rate)
    if last is not None:
        history_run(root, NAME, len(nights), last, **last_run)  # type: ignore[arg-type]


def _index_and_follow_the_files(root: Path, url: str | None) -> None:
    _nights(root, None)
    history_run(root, "another test", 50, 5.0)
    with ResultsIndex(root, url) as index:
        assert index.sync().read == 7
        assert index.sync().read == 0  # nothing changed: nothing read
        runs = index.runs(NAME)
        assert [r.figures["receive_rate"] for r in runs] == list(NIGHTS)
        assert len({r.workload for r in runs}) == len({r.testbed for r in runs}) == 1 and runs[0].testbed
        row = index.row("nightly-rabbitmq-000")
        assert row is not None
        assert (row["sut_kind"], row["sut_version"], row["client_libraries"]) == (
            "amqp",
            "3.13.7",
            {"aio-pika": "9.5.0"},
        )
        assert row["testbed"]["coordinator"]["cpu_model"] == "Lab CPU 9000" and row["path"] == str(
            root.resolve() / "nightly-rabbitmq-000"
        )
        assert index.names() == ["another test", NAME]
        # A run stored since, and a folder removed: the next read has both.
        history_run(root, NAME, 6, 10_000.0)
        for f in (root / "nightly-rabbitmq-001").iterdir():
            f.unlink()
        (root / "nightly-rabbitmq-001").rmdir()
        stats = index.sync()
        assert (stats.read, stats.dropped, stats.rows) == (1, 1, 7)
        assert [r.test_id[-3:] for r in index.runs(NAME)] == ["000", "002", "003", "004", "005", "006"]
        assert index.rebuild().rows == 7


def test_the_index_in_sqlite_beside_the_results(tmp_path: Path) -> None:
    _index_and_follow_the_files(tmp_path, None)
    assert (tmp_path / DEFAULT_INDEX_FILE).is_file()


@pytest.mark.postgresql
def test_the_index_in_postgresql(tmp_path: Path, pg_url: str) -> None:
    _index_and_follow_the_files(tmp_path, pg_url)
    assert not (tmp_path / DEFAULT_INDEX_FILE).exists()
    with psycopg.connect(PG) as check:  # Alembic's version table, in the test's schema
        schema = pg_url.rsplit("%3D", 1)[1]
        [(version,)] = check.execute(f"SELECT version_num FROM {schema}.maestro_index_version").fetchall()
        assert version == "0004"


def test_a_run_indexes_the_sut_version_its_inspector_read_where_the_script_states_none(tmp_path: Path) -> None:
    """#39: the label `sut_version` first; else the version in an inspector's samples (RabbitMQ's
    overview, a NATS server's, a router's general entity); a sample file that is a symbolic link
    is not read."""
    stated, read, linked = (history_run(tmp_path, NAME, n, 10_000.0) for n in range(3))
    for test_id in (read, linked):
        record = json.loads((tmp_path / test_id / "test.json").read_text())
        record["labels"] = record["definition"]["labels"] = {}
        (tmp_path / test_id / "test.json").write_text(json.dumps(record))
    samples = "when,version,publish_rate\n2026-10-01T00:00:01,,10.0\n2026-10-01T00:00:02,3.10.8,12.0\n"
    for test_id in (stated, read):
        (tmp_path / test_id / "inspector" / "i1").mkdir(parents=True)
        (tmp_path / test_id / "inspector" / "i1" / "overview.csv").write_text(samples)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.csv"
    outside.write_text(samples)
    (tmp_path / linked / "inspector" / "i1").mkdir(parents=True)
    (tmp_path / linked / "inspector" / "i1" / "overview.csv").symlink_to(outside)
    with ResultsIndex(tmp_path, None) as index:
        index.sync()
        versions = [(row := index.row(t)) and row["sut_version"] for t in (stated, read, linked)]
    assert versions == ["3.13.7", "3.10.8", ""]


def _tail_nights_and_an_index_from_before_curves(root: Path, url: str | None) -> None:
    """Six nights with their latency curves, the seventh's p99.99 60 % up where p99 is not; an
    index made at revision 0001 (no curves) is upgraded as it opens, and reads every record again."""
    for n, rate in enumerate(NIGHTS):
        history_run(root, NAME, n, rate, tail=1.0)
    history_run(root, NAME, len(NIGHTS), 10_000.0, tail=1.6)
    with ResultsIndex(root, url) as index:
        assert index.sync().read == 7
        [curve] = {r.distribution for r in index.runs(NAME)[:-1]}
        assert dict(curve)[99.99] == 10_000.0 and dict(index.runs(NAME)[-1].distribution)[99.99] == 16_000.0
        with index._engine.begin() as connection:  # back to the index as revision 0001 left it
            config = Config()
            config.set_main_option("script_location", str(Path(results_index.__file__).parent / "index_migrations"))
            config.attributes["connection"] = connection
            command.downgrade(config, "0001")
    with ResultsIndex(root, url) as index:
        assert index.sync().read == 7  # every row read again: its curve is back
        assert len([r for r in index.runs(NAME) if r.distribution]) == 7
    args = ("--db", url) if url else ()
    run = _maestro("history", NAME, "--results", str(root), *args, "--gate")
    assert run.returncode == ExitCode.REGRESSION, run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("gate: REGRESSION: Latency p99.95 rose 60.0 % (9.600 ms against 6.000 ms; threshold 10 %"), (
        line
    )
    assert line.endswith(
        "noise band ±0.5 % of 6 runs): nightly-rabbitmq-006's latency curve against their median (p99.99 too)"
    ), line


def test_a_tail_regression_in_sqlite_and_an_index_from_before_curves(tmp_path: Path) -> None:
    _tail_nights_and_an_index_from_before_curves(tmp_path, None)


@pytest.mark.postgresql
def test_a_tail_regression_in_postgresql_and_an_index_from_before_curves(tmp_path: Path, pg_url: str) -> None:
    _tail_nights_and_an_index_from_before_curves(tmp_path, pg_url)


def test_a_database_out_of_reach_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ResultsIndexError, match=r"postgresql://nobody:\*\*\*@127\.0\.0\.1:1/x: connection failed"):
        ResultsIndex(tmp_path, "postgresql://nobody:secret@127.0.0.1:1/x")
    run = _maestro("history", NAME, "--results", str(tmp_path), "--db", "postgresql://nobody:secret@127.0.0.1:1/x")
    assert run.returncode == ExitCode.CANNOT_RUN
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("maestro history: results index postgresql://nobody:***@127.0.0.1:1/x: connection failed")


@pytest.mark.postgresql
@pytest.mark.parametrize(
    "case",
    [
        (
            9_980.0,
            {},
            ExitCode.SUCCESS,
            "gate: PASS: nightly-rabbitmq-006 is within every threshold of 6 comparable runs",
        ),
        (
            9_000.0,
            {},
            ExitCode.REGRESSION,
            "gate: REGRESSION: Receive rate fell 10.0 % (threshold 5 %): nightly-rabbitmq-006",
        ),
        (
            10_000.0,
            {"lost": 20},
            ExitCode.REGRESSION,
            "gate: REGRESSION: Loss (lost / sent) rose from 0.0000% to 0.0200%",
        ),
        (
            10_000.0,
            {"cpu_model": "another CPU"},
            ExitCode.INCONCLUSIVE,
            "gate: INCONCLUSIVE: 0 comparable runs, 5 needed",
        ),
        (
            10_000.0,
            {"rate_per_client": 2000.0},
            ExitCode.INCONCLUSIVE,
            "gate: INCONCLUSIVE: 0 comparable runs, 5 needed",
        ),
        (
            10_000.0,
            {"outcome": "invalid", "reason": "the load generator was the limit"},
            ExitCode.INCONCLUSIVE,
            "gate: INCONCLUSIVE: the newest run nightly-rabbitmq-006 is invalid: the load generator was the limit",
        ),
    ],
    ids=["pass", "rate-regression", "loss-regression", "other-testbed", "other-workload", "invalid"],
)
def test_the_gate_as_a_nightly_job_runs_it(
    tmp_path: Path, pg_url: str, case: tuple[float, dict[str, object], int, str]
) -> None:
    last, extra, code, line = case
    _nights(tmp_path, last, **extra)
    run = _maestro("history", NAME, "--results", str(tmp_path), "--db", pg_url, "--gate")
    assert run.returncode == code, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(line), run.stderr


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def test_nights_whose_latency_no_clock_could_back_are_no_pass(
    tmp_path: Path, db: str, request: pytest.FixtureRequest
) -> None:
    """Every night kept as a success with `untrusted_latency="warn"`: no latency figure in any.
    The gate judged the rate alone and said PASS; it says which run's latency it could not judge
    and why, read back through the index."""
    for n, rate in enumerate((*NIGHTS, 10_000.0)):
        history_run(tmp_path, NAME, n, rate, latency_untrusted=f"a clock stepped on night {n}")
    args = ("--db", request.getfixturevalue("pg_url")) if db == "postgresql" else ()
    run = _maestro("history", NAME, "--results", str(tmp_path), *args, "--gate")
    assert run.returncode == ExitCode.INCONCLUSIVE, run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "gate: INCONCLUSIVE: Latency p50: no figure in nightly-rabbitmq-006 (a clock stepped on night 6) (and 2 more)"
    )


def test_a_copied_folder_is_no_night_of_its_own(tmp_path: Path) -> None:
    """A hostile pass copied the newest night's folder five times (copy1...): the copies counted
    as five more nights at its level, a change point the gate took as old news, and a 50 % drop
    passed. A test.json in a folder of another name is left out, saying so."""
    _nights(tmp_path, 5_000.0)
    newest = tmp_path / f"{NAME.replace(' ', '-')}-{len(NIGHTS):03d}"
    for n in range(1, 6):
        shutil.copytree(newest, tmp_path / f"copy{n}")
    run = _maestro("history", NAME, "--results", str(tmp_path), "--gate")
    assert run.returncode == ExitCode.REGRESSION, run.stderr
    assert "test copy1 left out: its test.json is test nightly-rabbitmq-006's (a copy?)" in run.stderr


def test_the_gate_with_too_few_runs_or_none_is_inconclusive(tmp_path: Path) -> None:
    run = _maestro("history", NAME, "--results", str(tmp_path), "--gate")
    assert run.returncode == ExitCode.INCONCLUSIVE
    assert run.stderr.strip().splitlines()[-1] == "gate: INCONCLUSIVE: no finished run"
    _nights(tmp_path, 10_000.0, nights=NIGHTS[:3])
    run = _maestro("history", NAME, "--results", str(tmp_path), "--gate")
    assert run.returncode == ExitCode.INCONCLUSIVE
    assert run.stderr.strip().splitlines()[-1] == (
        "gate: INCONCLUSIVE: 3 comparable runs, 5 needed (same name, workload and testbed as nightly-rabbitmq-003)"
    )


def test_maestro_index_rebuilds_from_the_files(tmp_path: Path) -> None:
    _nights(tmp_path, 10_000.0)
    run = _maestro("index", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"indexed 7 test records of {tmp_path} (1 test names with finished runs) in "
        f"sqlite:///{tmp_path.resolve() / DEFAULT_INDEX_FILE}"
    )

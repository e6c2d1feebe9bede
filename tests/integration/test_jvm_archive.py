"""The Spark driver's JVM writes a class-data archive as it exits, and the next start maps it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from protocol.process_table import processes_naming

# A session, one small job, and whether its JVM maps the cache's archive (its /proc maps).
SESSION = """
from pathlib import Path
from reports.time_series import spark_session
spark = spark_session()
assert spark.range(10).count() == 10
maps = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/maps").read_text()
print("mapped" if ".jsa" in maps and str(Path.cwd()) in maps else "not mapped")
print(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", ""))
"""


def _session(cache: Path) -> list[str]:
    env = os.environ | {"XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", SESSION], env=env, cwd=cache, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.splitlines()[-2:]


def test_the_next_start_maps_the_archive_the_first_one_wrote_as_it_exited(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    mapped, options = _session(cache)
    assert mapped == "not mapped" and "-XX:ArchiveClassesAtExit=" in options
    part = Path(options.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    # Its JVM writes the archive after the Python process ended: wait for it to be done.
    deadline = time.monotonic() + 60
    while processes_naming(str(part)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert part.exists() and part.stat().st_size > 10_000_000
    try:
        mapped, options = _session(cache)
        assert mapped == "mapped", options
        assert f"-XX:SharedArchiveFile={cache / 'maestro'}/spark-" in options and not part.exists()
    finally:
        for archive in (cache / "maestro").glob("spark-*"):  # 160 MB each: not left in pytest's kept folders
            archive.unlink()

"""A class-data archive for the Spark driver's JVM (HotSpot's dynamic CDS), made once per JVM and
Spark and mapped by every later start.

Most of a cold `maestro report`'s seconds before the first figure are the JVM loading and
checking Spark's classes from its jars. The first run has its JVM write the classes it loaded to
an archive as it exits (`-XX:ArchiveClassesAtExit`, some 160 MB, a few seconds after the report
is done); later runs map it (`-XX:SharedArchiveFile`). On a 2-core machine that took the
session's start from 6.0 to 2.5 s and the first job over 30 M records from 7.1 to 5.0 s
(bench/HISTORY.md).

Each JVM writes under a name of its own (`spark-<key>.<pid>.part`). A later start adopts a part
(renames it to `spark-<key>.jsa`, atomically) once no process names it on its command line (its
JVM has finished) and it begins with a dynamic archive's magic number, which HotSpot writes last,
after the regions: a JVM killed while writing leaves a part without it, which is deleted. A JVM
refuses an archive that another JVM build or another class path made and runs as it would
without one, so the key (the java binary, pyspark's version) only keeps archives apart.

Linux only (it reads /proc); elsewhere the JVM starts as it always did.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from protocol.process_table import processes_naming

__all__ = ["archive_options", "cache_dir"]

_MAGIC = bytes.fromhex("a8ab0bf0")  # 0xf00baba8, a dynamic archive's, little-endian
_MIN_FREE_BYTES = 2 << 30  # an archive is ~160 MB; none is made on a nearly full disk
# The archive's own chatter (hundreds of "Skipping ...: Signed JAR" lines at the dump) is off.
_QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "maestro"


def archive_options(cache: Path) -> list[str]:
    """The driver JVM's options: map this JVM's and Spark's archive where there is one, else
    write one at exit; none off Linux or without a java to name."""
    java = _java()
    # Spark's launcher splits the options at blanks: a cache path with one is left alone.
    if not sys.platform.startswith("linux") or java is None or any(c in str(cache) for c in " \t\"'\\"):
        return []
    key = _key(java)
    archive = cache / f"spark-{key}.jsa"
    if not archive.exists():
        _adopt(cache, key, archive)
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", *_QUIET]
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(cache).free < _MIN_FREE_BYTES:
            return []
    except OSError:  # an unwritable cache: no archive, as off Linux
        return []
    return [f"-XX:ArchiveClassesAtExit={cache / f'spark-{key}.{os.getpid()}.part'}", *_QUIET]


def _java() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME's, else the first on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _key(java: Path) -> str:
    import pyspark  # noqa: PLC0415 - the reporter imports Spark only when it makes a report

    stat = java.stat()
    identity = f"{java}|{stat.st_size}|{stat.st_mtime_ns}|{pyspark.__version__}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _adopt(cache: Path, key: str, archive: Path) -> None:
    """A finished part becomes the archive; a cut-off one is deleted; one being written stays."""
    for part in sorted(cache.glob(f"spark-{key}.*.part")):
        if processes_naming(str(part)):  # its JVM is still writing it
            continue
        try:
            with part.open("rb") as f:
                whole = f.read(len(_MAGIC)) == _MAGIC
            if whole and not archive.exists():
                os.replace(part, archive)
            else:
                part.unlink()
        except OSError:  # another start adopted or deleted it meanwhile
            continue

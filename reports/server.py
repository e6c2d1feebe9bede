"""`maestro serve`: the data server. Peers upload result files; people and tools list and
download them.

    PUT  /api/results/{test_id}/files/{path}   body = the file, header X-Content-SHA256
    GET  /api/results                          every test, newest first, with its outcome
    GET  /api/results/{test_id}                a test's files and its test.json
    GET  /api/results/{test_id}/summary        its figures, computed from the files
    GET  /results/{test_id}/{path}             download one file (a report page, too)
    GET  /                                     the results index of `maestro report`

A file is written to a temporary name, checked against the sender's SHA-256, then renamed:
the data root never holds half a file, and a bad checksum leaves nothing behind. Sending the
same file twice is answered "exists"; different content under an existing name is refused
unless the sender says it replaces it (the coordinator rewrites test.json as a test ends).
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse

from protocol.upload import CHECKSUM_HEADER, REPLACE_HEADER, file_sha256
from reports.paths import UnsafePathError, check_test_id, resolve_inside
from reports.summary import read_test_json, summarize

__all__ = ["create_app"]

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4 << 30


def create_app(root: Path) -> FastAPI:
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="Maestro data server", version="1")
    app.state.root = root
    app.include_router(router)
    return app


router = APIRouter()


def inside(request: Request, test_id: str, path: str = "") -> Path:
    """The path under the data root, or HTTP 400 saying why not."""
    try:
        return resolve_inside(request.app.state.root, test_id, path)
    except UnsafePathError as exc:
        raise HTTPException(400, str(exc)) from exc


@router.put("/api/results/{test_id}/files/{path:path}")
async def put_file(test_id: str, path: str, request: Request) -> JSONResponse:
    target = inside(request, test_id, path)
    expected = request.headers.get(CHECKSUM_HEADER, "").lower()
    if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        raise HTTPException(400, f"header {CHECKSUM_HEADER} must carry the file's SHA-256 in hex")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise HTTPException(413, f"larger than {MAX_FILE_BYTES} bytes")
                digest.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        actual = digest.hexdigest()
        created = _commit(tmp_name, target, path, actual, expected, replace=request.headers.get(REPLACE_HEADER) == "1")
    finally:
        _discard(tmp_name)
    log.info("%s %s/%s (%d bytes)", "stored" if created else "already had", test_id, path, size)
    answer = {"test_id": test_id, "path": path, "bytes": size, "sha256": actual}
    return JSONResponse(answer | {"status": "created" if created else "exists"}, status_code=201 if created else 200)


@router.get("/", response_model=None)
def home(request: Request) -> FileResponse | RedirectResponse:
    """The results index `maestro report` writes; the JSON list until there is one."""
    index = request.app.state.root / "index.html"
    if index.is_file():
        return FileResponse(index)
    return RedirectResponse("/api/results")


@router.get("/results/{test_id}", response_model=None)
def test_home(test_id: str, request: Request) -> RedirectResponse:
    inside(request, test_id)
    return RedirectResponse(f"/results/{test_id}/report/index.html")


@router.get("/api/results")
def list_tests(request: Request) -> list[dict[str, Any]]:
    tests = []
    for directory in request.app.state.root.iterdir():
        if not directory.is_dir() or directory.name.startswith("."):
            continue
        info = read_test_json(directory)
        tests.append(
            {
                "test_id": directory.name,
                "outcome": info.get("outcome"),
                "reason": info.get("reason"),
                "started": info.get("started"),
                "modified_s": directory.stat().st_mtime,
            }
        )
    return sorted(tests, key=lambda t: t["modified_s"], reverse=True)


@router.get("/api/results/{test_id}")
def show_test(test_id: str, request: Request) -> dict[str, Any]:
    directory = inside(request, test_id)
    if not directory.is_dir():
        raise HTTPException(404, f"no test {test_id}")
    files = [
        {"path": p.relative_to(directory).as_posix(), "bytes": p.stat().st_size}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    ]
    return {"test_id": test_id, "test": read_test_json(directory), "files": files}


@router.get("/api/results/{test_id}/summary")
def summary(test_id: str, request: Request) -> dict[str, Any]:
    """The test's figures from the files collected so far (the summary.json keys)."""
    directory = inside(request, test_id)
    if not directory.is_dir():
        raise HTTPException(404, f"no test {test_id}")
    try:
        figures = summarize(directory)
    except (OSError, ValueError, KeyError) as exc:
        raise HTTPException(422, f"cannot read the files of {test_id}: {exc}") from exc
    info = read_test_json(directory)
    return {"outcome": info.get("outcome"), "reason": info.get("reason"), **figures}


@router.get("/results/{test_id}/{path:path}")
def download(test_id: str, path: str, request: Request) -> FileResponse:
    target = inside(request, test_id, path)
    test_dir = inside(request, test_id)
    if (
        path.split("/", maxsplit=1)[0] == "report"
        and test_dir.is_dir()
        and not (test_dir / "report" / "index.html").exists()
    ):
        _report_on_request(request.app.state.root, test_id)
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        raise HTTPException(404, f"no file {path} in test {check_test_id(test_id)}")
    return FileResponse(target)


_REPORT_LOCK = threading.Lock()


def _report_on_request(root: Path, test_id: str) -> None:
    """A test without a report gets one when someone asks for it (the reporter in its own
    process: Spark's JVM does not belong in the server). One at a time."""
    with _REPORT_LOCK:
        if (root / test_id / "report" / "index.html").exists():
            return
        log.info("writing the report of %s on request", test_id)
        run = subprocess.run(
            [sys.executable, "-m", "reports", "report", str(root), test_id], capture_output=True, text=True, check=False
        )
        if run.returncode != 0:
            log.error("report of %s failed: %s", test_id, run.stderr[-2000:])
            raise HTTPException(500, f"the report of {test_id} could not be written; the server log says why")


def _commit(tmp_name: str, target: Path, path: str, actual: str, expected: str, *, replace: bool) -> bool:
    """Move the checked upload into place; False when identical content was already there."""
    if actual != expected:
        raise HTTPException(400, f"checksum mismatch: received {actual}, header says {expected}")
    if target.exists():
        if file_sha256(target) == actual:
            return False
        if not replace:
            raise HTTPException(409, f"{path} exists with other content (send {REPLACE_HEADER}: 1 to replace)")
    Path(tmp_name).replace(target)
    return True


def _discard(tmp_name: str) -> None:
    Path(tmp_name).unlink(missing_ok=True)

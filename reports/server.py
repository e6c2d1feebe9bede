"""`maestro serve`: the data server. Peers upload result files; people and tools list and
download them.

    PUT  /api/results/{test_id}/files/{path}   body = the file, header X-Content-SHA256
    GET  /api/results                          every test, newest first, with its outcome
    GET  /api/results/{test_id}                a test's files and its test.json
    GET  /api/results/{test_id}/summary        its figures, computed from the files
    POST /api/results/{test_id}/summary        the same, with the peers' clocks in the body
                                               ({"peers": [...]} as test.json has them), for
                                               the coordinator before test.json exists
    GET  /api/results/{test_id}/report         where its report is: done, queued, building, failed
    GET  /results/{test_id}/{path}             download one file; a report not written yet is
                                               queued (reports/report_queue.py) and answered 202
                                               with a page that reloads itself until it is there
    GET  /api/history/{name}                   every run of the test named so, its figures and
                                               change points (reports.history)
    GET  /history/{name}                       the same as a page, one chart per figure
                                               (both read the results index, reports.results_index)
    GET  /compare?ids=A,B[,...]                2 to 8 runs side by side: throughput, latency
                                               percentiles and a delta table with the noise band
                                               (reports.compare_page); /api/compare the table
    GET  /compare/previous/{test_id}           redirected to the comparison with the run of the
                                               same name before it (the reports link here)
    GET  /                                     the results index of `maestro report`, with the
                                               tests running now above it
    GET  /metrics                              the running tests for Prometheus (reports/metrics.py)
    ...  /api/live, /live/{test_id}            running tests and their live pages (reports/live.py)

A file is written to a temporary name, checked against the sender's SHA-256, then renamed:
the data root never holds half a file, and a bad checksum leaves nothing behind. Sending the
same file twice is answered "exists"; different content under an existing name is refused
unless the sender says it replaces it (the coordinator rewrites test.json as a test ends).

With a token (`serve --token-file`), a PUT must carry `Authorization: Bearer <token>`; reading
stays open, as the reports are for people to browse, but a reader without the token starts at
most one report build a minute (reports/report_queue.py). No path through a symbolic link is
served, listed or written (reports/paths.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import logging
import mimetypes
import os
import secrets
import stat
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.background import BackgroundTask

from protocol.json_value import JsonObject
from protocol.test_record import TestRecord
from protocol.upload import CHECKSUM_HEADER, MISMATCH_STATUS, REPLACE_HEADER
from reports.auth import carries_token, check_token
from reports.compare_page import compare_page
from reports.comparison import (
    ComparedRun,
    NoiseBand,
    comparison_json,
    delta_table,
    noise_bands,
    previous_in,
)
from reports.history import History, Run, analyse, history_page
from reports.json_body import json_body
from reports.live import LiveRow, LiveTests, live_router
from reports.metrics import live_registry
from reports.page import PLOTLY_JS, judged
from reports.paths import (
    UnsafePathError,
    check_test_id,
    open_file,
    open_folder,
    plain_files,
    resolve_inside,
    result_dirs,
)
from reports.report_queue import BuildState, ReportQueue
from reports.results_index import ResultsIndex, ResultsIndexError
from reports.run_facts import started_utc
from reports.summary import read_peers, read_test_record, receive_seconds, summarize

__all__ = ["create_app"]

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4 << 30
MAX_RECORD_BYTES = 16 << 20
COMPARED_RUNS = (2, 8)  # the fewest and most runs a comparison takes


def create_app(root: Path, token: bytes | None = None, db: str | None = None) -> FastAPI:
    """`db`: the results index's URL (default: SQLite beside the results); its histories read it."""
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    index = ResultsIndex(root, db)
    reports = ReportQueue(root)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(reports.close)  # the report builder and its JVM go with the server
        index.close()

    app = FastAPI(title="Maestro data server", version="1", lifespan=lifespan)
    app.state.root = root
    app.state.token = token
    app.state.reports = reports
    app.state.index = index
    app.state.live = LiveTests()
    app.state.metrics = live_registry(app.state.live)
    app.include_router(router)
    app.include_router(live_router)
    app.include_router(index_links)  # last: it takes only what no other route did
    return app


router = APIRouter()
index_links = APIRouter()


@index_links.api_route(
    "/{test_id}/{path:path}", methods=["GET", "HEAD", "PUT", "POST", "DELETE"], include_in_schema=False
)
def index_link(test_id: str, path: str, request: Request) -> RedirectResponse:
    """The results index's links are relative to the results folder, as it is opened from disk
    too: served at /, a test's `T/report/index.html` is /results/T/report/index.html (it was a
    404: no test could be opened from the index the data server served). Anything else no
    route took stays a 404, whatever its method."""
    try:
        check_test_id(test_id)
    except UnsafePathError as exc:
        raise HTTPException(404, f"no page {test_id}/{path}") from exc
    if request.method not in ("GET", "HEAD"):
        raise HTTPException(404, f"no page {test_id}/{path}")
    return RedirectResponse(f"/results/{test_id}/{urllib.parse.quote(path)}")


def inside(request: Request, test_id: str, path: str = "") -> Path:
    """The path under the data root, or HTTP 400 saying why not."""
    try:
        return resolve_inside(request.app.state.root, test_id, path)
    except UnsafePathError as exc:
        raise HTTPException(400, str(exc)) from exc


@router.put("/api/results/{test_id}/files/{path:path}")
async def put_file(test_id: str, path: str, request: Request) -> JSONResponse:
    check_token(request)
    target = inside(request, test_id, path)
    expected = request.headers.get(CHECKSUM_HEADER, "").lower()
    if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        raise HTTPException(400, f"header {CHECKSUM_HEADER} must carry the file's SHA-256 in hex")
    root = request.app.state.root
    digest = hashlib.sha256()
    size = 0
    try:
        with open_folder(root, target.parent, create=True) as folder:
            tmp_name = f".upload-{secrets.token_hex(8)}.tmp"
            fd = open_file(folder, tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
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
                replace = request.headers.get(REPLACE_HEADER) == "1"
                created = _commit(
                    folder, tmp_name, target.name, path=path, actual=actual, expected=expected, replace=replace
                )
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_name, dir_fd=folder)
    except UnsafePathError as exc:  # a folder swapped for a link since the check
        raise HTTPException(400, str(exc)) from exc
    log.info("%s %s/%s (%d bytes)", "stored" if created else "already had", test_id, path, size)
    answer = {"test_id": test_id, "path": path, "bytes": size, "sha256": actual}
    return JSONResponse(answer | {"status": "created" if created else "exists"}, status_code=201 if created else 200)


@router.get("/", response_model=None)
async def home(request: Request) -> Response:
    """The results index `maestro report` writes, with the tests running now above it; made
    from the test.json files where no report has written it yet (it was the JSON list, with no
    figures and no links, until a first report)."""
    root = request.app.state.root
    running = request.app.state.live.listing()
    if not running:
        try:
            return _file_response(root, root / "index.html")
        except (FileNotFoundError, NotADirectoryError, UnsafePathError):  # none yet, or a link: not served
            return HTMLResponse(await asyncio.to_thread(_index_page, root))
    try:
        with open_folder(root, root) as folder, os.fdopen(open_file(folder, "index.html"), "rb") as f:
            page = f.read().decode()
    except (OSError, UnsafePathError, UnicodeDecodeError):
        page = await asyncio.to_thread(_index_page, root)
    section = _running_section(running)
    at = page.find("<h1>")
    return HTMLResponse(page + section if at < 0 else page[:at] + section + page[at:])


def _index_page(root: Path) -> str:
    from reports.report import index_page  # noqa: PLC0415 - Plotly's import only where it is needed

    return index_page(root)


def _running_section(tests: list[LiveRow]) -> str:
    """The tests the data server hears of: those running (or gone silent) apart from those that
    ended lately, which link to their reports and show how they ended."""

    def row(t: LiveRow) -> str:
        test_id = html.escape(t.test_id)
        progress = "" if t.progress is None else f"{100 * t.progress:.0f} %"
        return (
            f'<tr data-state="{html.escape(t.state)}"><td><a href="/live/{test_id}">{test_id}</a></td>'
            f"<td>{html.escape(t.name or '')}</td><td>{html.escape(t.state)}</td>"
            f"<td>{t.elapsed_s:.0f} s</td><td><progress max='1' value='{t.progress or 0}'></progress> "
            f"{progress}</td><td>{t.peers}</td></tr>"
        )

    def ended(t: LiveRow) -> str:
        test_id = html.escape(t.test_id)
        return (
            f'<tr><td><a href="/results/{test_id}/report/">{test_id}</a></td>'
            f"<td>{html.escape(t.name or '')}</td><td>{html.escape(t.outcome or t.state)}</td>"
            f"<td>{t.elapsed_s:.0f} s</td></tr>"
        )

    running = [t for t in tests if t.state in ("running", "silent")]
    finished = [t for t in tests if t.state not in ("running", "silent")]
    sections = []
    if running:
        head = "<tr><th>test</th><th>name</th><th>state</th><th>elapsed</th><th>progress</th><th>peers</th></tr>"
        body = "".join(row(t) for t in running)
        table = f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"
        sections.append(f'<section id="running"><h2>Running now</h2>{table}</section>')
    if finished:
        head = "<tr><th>test</th><th>name</th><th>outcome</th><th>took</th></tr>"
        body = "".join(ended(t) for t in finished)
        table = f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"
        sections.append(f'<section id="finished"><h2>Ended lately</h2>{table}</section>')
    return "".join(sections)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """The running tests in the Prometheus text format (reports/metrics.py)."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)


@router.get("/results/{test_id}", response_model=None)
def test_home(test_id: str, request: Request) -> RedirectResponse:
    inside(request, test_id)
    return RedirectResponse(f"/results/{test_id}/report/index.html")


@router.get("/api/results", response_model=None)
def list_tests(request: Request) -> list[JsonObject]:
    tests: list[JsonObject] = []
    stamps: list[float] = []
    root = request.app.state.root
    for directory in result_dirs(root):
        try:  # through descriptors: a folder swapped for a link since the listing is left out
            with open_folder(root, directory) as folder:
                info, modified_s = read_test_record(directory, dir_fd=folder), os.fstat(folder).st_mtime
        except (OSError, UnsafePathError):
            continue
        tests.append(
            {
                "test_id": directory.name,
                "outcome": info.outcome if info else None,
                "reason": info.reason if info else None,
                "started": info.started if info else None,
                "modified_s": modified_s,
            }
        )
        stamps.append(modified_s)
    return [test for _, test in sorted(zip(stamps, tests, strict=True), key=lambda st: st[0], reverse=True)]


@router.get("/api/results/{test_id}", response_model=None)
def show_test(test_id: str, request: Request) -> JsonObject:
    directory = inside(request, test_id)
    try:
        with open_folder(request.app.state.root, directory) as folder:
            found = sorted(plain_files(folder), key=lambda f: PurePosixPath(f[0]).parts)
            record = read_test_record(directory, dir_fd=folder)
    except (FileNotFoundError, NotADirectoryError, UnsafePathError) as exc:
        raise HTTPException(404, f"no test {test_id}") from exc
    files: list[JsonObject] = [{"path": path, "bytes": size} for path, size in found]
    return {"test_id": test_id, "test": {} if record is None else record.to_json(), "files": files}


@router.get("/api/results/{test_id}/summary", response_model=None)
def summary(test_id: str, request: Request) -> JsonObject:
    """The test's figures from the files collected so far (the summary.json keys), latency
    corrected by the clock offsets test.json records."""
    return _summary(request, test_id, None)


@router.post("/api/results/{test_id}/summary", response_model=None)
async def summary_with_clocks(test_id: str, request: Request) -> JsonObject:
    """The same, corrected by the clocks the body carries: the coordinator asks before it has
    written test.json, and its result must carry the figures the report will show."""
    body = await json_body(request, MAX_RECORD_BYTES, "a record")
    try:
        record = TestRecord.from_json(body)
    except ValueError as exc:
        raise HTTPException(400, f'the body must be {{"peers": [...]}}, as test.json has them ({exc})') from exc
    return await asyncio.to_thread(_summary, request, test_id, record)


def _summary(request: Request, test_id: str, record: TestRecord | None) -> JsonObject:
    directory = inside(request, test_id)
    if not directory.is_dir():
        raise HTTPException(404, f"no test {test_id}")
    try:
        figures = summarize(directory, record=record)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HTTPException(422, f"cannot read the files of {test_id}: {exc}") from exc
    info = read_test_record(directory)
    return {"outcome": info.outcome if info else None, "reason": info.reason if info else None, **figures.to_json()}


@router.get("/api/history/{name:path}", response_model=None)
async def history_json(name: str, request: Request) -> JsonObject:
    history = await asyncio.to_thread(_history, request, name)
    return history.as_dict()


@router.get("/history/{name:path}", response_class=HTMLResponse)
async def history(name: str, request: Request) -> HTMLResponse:
    found = await asyncio.to_thread(_history, request, name)
    return HTMLResponse(history_page(found, "/assets/plotly.min.js"))


def _history(request: Request, name: str) -> History:
    runs = _runs_named(request, name)
    if not runs:
        raise HTTPException(404, f"no finished run of a test named {name!r}")
    return analyse(name, runs)


@router.get("/compare", response_class=HTMLResponse)
async def compare(request: Request, ids: str = "") -> HTMLResponse:
    runs, noise = await asyncio.to_thread(_compared, request, ids)
    return HTMLResponse(compare_page(runs, noise, "/assets/plotly.min.js"))


@router.get("/api/compare", response_model=None)
async def compare_json(request: Request, ids: str = "") -> JsonObject:
    runs, noise = await asyncio.to_thread(_compared, request, ids)
    return comparison_json(runs, delta_table(runs, noise))


@router.get("/compare/previous/{test_id}")
def compare_with_previous(test_id: str, request: Request) -> RedirectResponse:
    """The comparison of a run with the one of its name that started before it: a report is
    written once, and links here rather than to a run that was the previous one then."""
    directory = inside(request, test_id)
    if not directory.is_dir():
        raise HTTPException(404, f"no test {test_id}")
    record = read_test_record(directory)
    if record is None or not record.name:
        raise HTTPException(404, f"test {test_id} has no name, so no previous run")
    previous = previous_in(_runs_named(request, record.name), test_id, started_utc(record))
    if previous is None:
        raise HTTPException(404, f"no run named {record.name!r} started before {test_id}")
    ids = ",".join(urllib.parse.quote(t, safe="") for t in (previous, test_id))
    return RedirectResponse(f"/compare?ids={ids}")


def _compared(request: Request, ids: str) -> tuple[list[ComparedRun], dict[str, NoiseBand]]:
    """The runs `ids` names (comma-separated), each read from its folder, and the noise of each
    figure over the runs of the first one's name; HTTP 400 for a wrong list, 404 naming a test
    that is not there."""
    test_ids = [t.strip() for t in ids.split(",")] if ids.strip() else []
    fewest, most = COMPARED_RUNS
    if not fewest <= len(test_ids) <= most:
        raise HTTPException(400, f"ids: give {fewest} to {most} test ids, comma-separated, not {len(test_ids)}")
    if len(set(test_ids)) < len(test_ids):
        raise HTTPException(400, "ids: a test is named twice")
    folders = [inside(request, t) for t in test_ids]  # every id checked before any folder is read
    runs = [_compared_run(directory) for directory in folders]
    first = runs[0]
    history = _runs_named(request, first.name) if first.name else []
    return runs, noise_bands(history, first.workload, first.testbed)


def _compared_run(directory: Path) -> ComparedRun:
    if not directory.is_dir():
        raise HTTPException(404, f"no test {directory.name}")
    record = read_test_record(directory) or TestRecord(directory.name)
    if record.steps:
        raise HTTPException(400, f"test {directory.name} is a series of phases: compare its phases")
    try:
        peers = read_peers(directory)
        figures = judged(summarize(directory, peers, record), record)
        seconds = receive_seconds(peers)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HTTPException(422, f"cannot read the files of {directory.name}: {exc}") from exc
    return ComparedRun(directory.name, figures, seconds.per_second, record)


def _runs_named(request: Request, name: str) -> list[Run]:
    index: ResultsIndex = request.app.state.index
    try:
        index.sync()  # what the coordinator stored since the last read
        return index.runs(name)
    except ResultsIndexError as exc:
        raise HTTPException(503, str(exc)) from exc


@router.get("/assets/plotly.min.js")
def plotly_js() -> FileResponse:
    """The offline Plotly bundle the reports ship, for the pages this server draws itself."""
    return FileResponse(PLOTLY_JS, media_type="text/javascript")


@router.get("/api/results/{test_id}/report")
def report_state(test_id: str, request: Request) -> dict[str, object]:
    """Where the test's report is: done, or queued, building or failed (asking queues it)."""
    if not inside(request, test_id).is_dir():
        raise HTTPException(404, f"no test {test_id}")
    return _ask(request, test_id).as_dict()


@router.get("/results/{test_id}/{path:path}", response_model=None)
def download(test_id: str, path: str, request: Request) -> FileResponse | Response:
    target = inside(request, test_id, path)
    test_dir = inside(request, test_id)
    if (
        path.split("/", maxsplit=1)[0] == "report"
        and test_dir.is_dir()
        and not (test_dir / "report" / "index.html").exists()
    ):
        return _building(test_id, path, _ask(request, test_id))
    try:
        return _file_response(request.app.state.root, target)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise HTTPException(404, f"no file {path} in test {check_test_id(test_id)}") from exc
    except UnsafePathError as exc:  # a link made since the check
        raise HTTPException(400, str(exc)) from exc


def _file_response(root: Path, target: Path) -> FileResponse:
    """`target` (a folder: its index.html), opened through descriptors that follow no link and
    served from the open file: /proc/self/fd names the file already opened, not the path, so
    nothing swapped in after the open is read (the data server runs on Linux). The file closes
    once it is sent, or with the response if that is never sent."""
    with open_folder(root, target.parent) as folder:
        fd = open_file(folder, target.name, os.O_RDONLY | os.O_NONBLOCK)
    name = target.name
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        try:
            index = open_file(fd, "index.html")
        finally:
            os.close(fd)
        fd, name = index, "index.html"
    file = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        file.close()
        raise FileNotFoundError(name)
    media_type = mimetypes.guess_type(name)[0] or "text/plain"
    return FileResponse(
        f"/proc/self/fd/{fd}", media_type=media_type, stat_result=info, background=BackgroundTask(file.close)
    )


def _ask(request: Request, test_id: str) -> BuildState:
    """The report's state, asked with the token or without (reports/report_queue.py: who may
    start a build, and how often)."""
    queue: ReportQueue = request.app.state.reports
    return queue.ask(test_id, trusted=carries_token(request))


_BUILDING_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>Building the report of {test_id}</title></head>
<body style="font-family: sans-serif; margin: 3em">
<h1>Building the report of {test_id}</h1>
<p id="report-state" data-state="{state}">{what}</p>
<p>This page reloads itself every 2 s and shows the report once it is written.</p>
{error}</body></html>
"""


def _building(test_id: str, path: str, state: BuildState) -> Response:
    """What a report asked for before it exists gets: 202 and where it is, HTML for a page."""
    if state.state == "done":  # written between the check and the ask
        return RedirectResponse(f"/results/{test_id}/{path}")
    info = state.as_dict()
    if not (path.endswith(".html") or path.rstrip("/") == "report"):
        return JSONResponse(info, status_code=202, headers={"Retry-After": str(state.retry_after_s())})
    what = {
        "queued": f"Queued: {state.ahead} report(s) before it.",
        "building": f"Building for {info['elapsed_s']} s: {state.step}.",
        "failed": "The reporter failed; it is tried again when asked in 30 s.",
        "held": f"Not started yet: without the server's token a report build starts at most once a minute; "
        f"this page asks again in {state.retry_after_s()} s.",
    }[state.state]
    error = f"<pre>{html.escape(state.error)}</pre>" if state.error else ""
    page = _BUILDING_PAGE.format(test_id=html.escape(test_id), state=state.state, what=html.escape(what), error=error)
    return HTMLResponse(page, status_code=202, headers={"Retry-After": str(state.retry_after_s())})


def _commit(folder: int, tmp_name: str, name: str, *, path: str, actual: str, expected: str, replace: bool) -> bool:
    """Move the checked upload into place in `folder`; False when identical content was already
    there."""
    if actual != expected:
        raise HTTPException(MISMATCH_STATUS, f"checksum mismatch: received {actual}, header says {expected}")
    try:
        with os.fdopen(open_file(folder, name), "rb") as existing:
            same = hashlib.file_digest(existing, "sha256").hexdigest() == actual
    except FileNotFoundError:
        pass
    else:
        if same:
            return False
        if not replace:
            raise HTTPException(409, f"{path} exists with other content (send {REPLACE_HEADER}: 1 to replace)")
    os.replace(tmp_name, name, src_dir_fd=folder, dst_dir_fd=folder)
    return True

"""Running tests, as their coordinators post them (coordinator/running/live.py): the data server keeps
each one's latest update and its points per second, in memory, for the live page, the index
and `/metrics`.

    POST /api/live/{test_id}          an update (with the bearer token, as uploads); the answer
                                      carries `stop` once a stop was asked
    POST /api/live/{test_id}/stop     ask the test's coordinator to stop it (with the bearer token)
    GET  /api/live                    the tests running now, and those finished in the last minutes
    GET  /api/live/{test_id}          one test's latest update with every point so far
    GET  /api/live/{test_id}/events   server-sent events: each update as it comes, with its new points
    GET  /live/{test_id}              the live page (reports/live_page.py)

A test whose coordinator stopped posting is "silent" after a while, and a finished or silent
test is dropped some minutes later: the files on disk, not this memory, are the record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field, replace

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from protocol.json_value import JsonObject
from protocol.live import LivePoint, LiveUpdate
from reports.auth import check_token
from reports.json_body import json_body
from reports.live_page import live_page
from reports.paths import UnsafePathError, check_test_id

__all__ = ["LiveRow", "LiveTest", "LiveTests", "live_router"]

log = logging.getLogger(__name__)

SILENT_AFTER_S = 30.0
FORGET_AFTER_S = 600.0
MAX_POINTS = 200_000  # a point a second: more than two days
MAX_UPDATE_BYTES = 4 << 20
_EVENT_KEEPALIVE_S = 15.0


@dataclass
class LiveTest:
    update: LiveUpdate  # the latest, without its points
    points: list[LivePoint] = field(default_factory=list)
    version: int = 0
    seen_mono: float = field(default_factory=time.monotonic)
    stop: str | None = None  # why its coordinator is to stop it, once asked (the answer to its next post)

    @property
    def state(self) -> str:
        state = self.update.state
        if state == "running" and time.monotonic() - self.seen_mono > SILENT_AFTER_S:
            return "silent"
        return state

    def view(self, since: int = 0) -> JsonObject:
        """The latest update, with the points from index `since` on."""
        points = [point.to_json() for point in self.points[since:]]
        bound = [why for peer in self.update.peers if (why := peer.generator_bound())]
        view = self.update.to_json() | {"state": self.state, "version": self.version, "points": points}
        # Ended: each peer's counts are the summary's, as /metrics' are (its last report's were a
        # second or so short: 82 sent where the summary counted 100).
        summary = self.update.summary if self.update.state == "finished" else None
        final = summary.peers if summary is not None else {}
        view["peers"] = [peer.to_json() | dict(final.get(peer.name, {})) for peer in self.update.peers]
        return view | {"generator_bound": bound}


@dataclass
class LiveTests:
    tests: dict[str, LiveTest] = field(default_factory=dict)
    _changed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def post(self, test_id: str, update: LiveUpdate) -> None:
        points, update = update.points, replace(update, points=())
        test = self.tests.get(test_id)
        if test is None:
            test = self.tests[test_id] = LiveTest(update)
        test.update = update
        test.points.extend(points)
        del test.points[:-MAX_POINTS]
        test.version += 1
        test.seen_mono = time.monotonic()
        self.forget_old()
        async with self._condition():
            self._condition().notify_all()

    async def wait_change(self, test_id: str, version: int, timeout_s: float) -> LiveTest | None:
        """The test once its version passes `version`, or None after `timeout_s`."""
        async with self._condition():
            try:
                await asyncio.wait_for(self._condition().wait_for(lambda: self._version(test_id) > version), timeout_s)
            except TimeoutError:
                return None
        return self.tests.get(test_id)

    def _version(self, test_id: str) -> int:
        test = self.tests.get(test_id)
        return test.version if test else -1

    def forget_old(self) -> None:
        now = time.monotonic()
        for test_id, test in list(self.tests.items()):
            if test.state != "running" and now - test.seen_mono > FORGET_AFTER_S:
                del self.tests[test_id]

    def listing(self) -> list[LiveRow]:
        self.forget_old()
        return [_row(test) for test in sorted(self.tests.values(), key=lambda t: -t.update.started_s)]


@dataclass(frozen=True)
class LiveRow:
    """A test as /api/live lists it, and the data server's front page."""

    test_id: str
    name: str | None
    kind: str | None
    state: str
    outcome: str | None
    elapsed_s: float
    expected_s: float | None
    progress: float | None  # of the expected time; None where none is expected
    peers: int

    def to_json(self) -> JsonObject:
        return asdict(self)


def _row(test: LiveTest) -> LiveRow:
    u = test.update
    return LiveRow(
        test_id=u.test_id,
        name=u.name,
        kind=u.kind,
        state=test.state,
        outcome=u.outcome,
        elapsed_s=round(u.elapsed_s, 1),
        expected_s=u.expected_s,
        progress=min(1.0, u.elapsed_s / u.expected_s) if u.expected_s else None,
        peers=len(u.peers),
    )


live_router = APIRouter()


def _tests(request: Request) -> LiveTests:
    tests: LiveTests = request.app.state.live
    return tests


def _checked(test_id: str) -> str:
    try:
        return check_test_id(test_id)
    except UnsafePathError as exc:
        raise HTTPException(400, str(exc)) from exc


@live_router.post("/api/live/{test_id}", response_model=None)
async def post_live(test_id: str, request: Request) -> JsonObject:
    check_token(request)
    _checked(test_id)
    body = await json_body(request, MAX_UPDATE_BYTES, "a live update")
    try:
        update = LiveUpdate.from_json(body)
    except ValueError as exc:
        raise HTTPException(400, f"not a live update of test {test_id}: {exc}") from exc
    if update.test_id != test_id:
        raise HTTPException(400, f'the body must be a live update of test {test_id} ({{"test_id": ..., ...}})')
    tests = _tests(request)
    await tests.post(test_id, update)
    stop = tests.tests[test_id].stop
    answer: JsonObject = {"test_id": test_id, "status": "taken"}
    return answer | ({"stop": stop} if stop else {})


@live_router.post("/api/live/{test_id}/stop", response_model=None)
async def stop_live(test_id: str, request: Request) -> JsonObject:
    """The live page's stop button: the coordinator learns it from the answer to its next post
    (a second at most) and stops the test as Ctrl-C would, its files collected."""
    check_token(request)
    # A form or text/plain POST is "simple": any page the operator opens could send one to a
    # server without a token. JSON needs a CORS preflight, which this server never grants.
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise HTTPException(415, "a stop is asked with Content-Type: application/json (as the live page does)")
    test = _tests(request).tests.get(_checked(test_id))
    if test is None or test.state != "running":
        raise HTTPException(409, f"test {test_id} is not running here")
    who = request.client.host if request.client else "unknown"
    test.stop = f"stopped from the live page (by {who})"
    log.warning("test %s: %s", test_id, test.stop)
    return {"test_id": test_id, "status": "stop asked"}


# The routes that read the tests run on the event loop, as the posts that change them do.
@live_router.get("/api/live", response_model=None)
async def list_live(request: Request) -> list[JsonObject]:
    return [row.to_json() for row in _tests(request).listing()]


@live_router.get("/api/live/{test_id}", response_model=None)
async def show_live(test_id: str, request: Request) -> JsonObject:
    test = _tests(request).tests.get(_checked(test_id))
    if test is None:
        raise HTTPException(404, f"no running test {test_id} (finished tests are under /results/{test_id})")
    return test.view()


@live_router.get("/api/live/{test_id}/events")
async def live_events(test_id: str, request: Request, since: int = 0) -> StreamingResponse:
    """Each update as an event `data: {...}`, with the points from index `since` on, the first
    at once; a comment line every 15 s keeps proxies from closing the stream."""
    tests = _tests(request)
    if _checked(test_id) not in tests.tests:
        raise HTTPException(404, f"no running test {test_id}")

    async def stream() -> AsyncIterator[str]:
        sent_points, version = since, -1
        while not await request.is_disconnected():
            test = await tests.wait_change(test_id, version, _EVENT_KEEPALIVE_S)
            if test is None:
                if test_id not in tests.tests:
                    return
                yield ": still here\n\n"
                continue
            version = test.version
            view = test.view(sent_points)
            sent_points = len(test.points)
            yield f"data: {json.dumps(view | {'points_total': sent_points})}\n\n"
            if view["state"] == "finished":
                return

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@live_router.get("/live/{test_id}", response_class=HTMLResponse)
async def live(test_id: str, request: Request) -> HTMLResponse:
    test = _tests(request).tests.get(_checked(test_id))
    return HTMLResponse(live_page(test_id, None if test is None else test.update))

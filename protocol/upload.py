"""Sending result files to the data server: checksummed, retried, idempotent.

A file is deleted locally only after the server answered with the same SHA-256 we sent, so a
crash, a timeout or a refused upload never loses it; sending it again is harmless (the server
answers "already there" for identical content). The SHA-256 sent for a file its peer.json
records is the recorded one (`protocol.file_check`): the server refuses bytes that are not what
the peer wrote, and a refusal for a mismatch is sent again, as a broken connection is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from protocol.results import read_peer_json

__all__ = [
    "UploadError",
    "UploadReport",
    "file_sha256",
    "upload_bytes",
    "upload_file",
    "upload_tree",
    "upload_with_retries",
]


log = logging.getLogger(__name__)

CHECKSUM_HEADER = "X-Content-SHA256"
MISMATCH_STATUS = 422  # the server's answer to a body whose SHA-256 is not the header's
REPLACE_HEADER = "X-Replace"
_ATTEMPTS = 5
_TIMEOUT_S = 60.0


class UploadError(Exception):
    pass


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)  # remote paths the server confirmed
    failed: dict[str, str] = field(default_factory=dict)  # remote path -> why

    @property
    def ok(self) -> bool:
        return not self.failed


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def file_url(server_url: str, test_id: str, remote: str) -> str:
    quoted = urllib.parse.quote(remote, safe="/")
    return f"{server_url.rstrip('/')}/api/results/{urllib.parse.quote(test_id, safe='')}/files/{quoted}"


def _put(
    url: str, body: bytes | Path, sha256: str, replace: bool, token: str | None, *, attempts: int = _ATTEMPTS
) -> dict[str, object]:
    headers = {CHECKSUM_HEADER: sha256, "Content-Type": "application/octet-stream"}
    if replace:
        headers[REPLACE_HEADER] = "1"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    last = ""
    for attempt in range(1, attempts + 1):
        data = body.read_bytes() if isinstance(body, Path) else body
        request = urllib.request.Request(url, data=data, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                answer: dict[str, object] = json.loads(response.read())
            if answer.get("sha256") != sha256:
                raise UploadError(f"server confirmed a different checksum: {answer.get('sha256')}")
            return answer
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code < 500 and exc.code != MISMATCH_STATUS:  # refused for what it is: sending again will not help
                raise UploadError(f"HTTP {exc.code}: {detail}") from exc
            last = f"HTTP {exc.code}: {detail}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
        if attempt < attempts:
            time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
    raise UploadError(f"gave up after {attempts} attempts: {last}")


# `token`: the data server's bearer token for writes, when it has one (`serve --token-file`).


def upload_bytes(
    server_url: str,
    test_id: str,
    remote: str,
    data: bytes,
    *,
    replace: bool = False,
    token: str | None = None,
    attempts: int = _ATTEMPTS,
) -> None:
    _put(
        file_url(server_url, test_id, remote), data, hashlib.sha256(data).hexdigest(), replace, token, attempts=attempts
    )


def upload_file(
    server_url: str, test_id: str, remote: str, path: Path, token: str | None = None, *, sha256: str | None = None
) -> None:
    """`sha256`: what the file must be (its peer's record), else what it is now."""
    _put(file_url(server_url, test_id, remote), path, sha256 or file_sha256(path), False, token)


def recorded_sha256(local: Path) -> dict[Path, str]:
    """The SHA-256 every peer.json under `local` records for its files, by path."""
    recorded: dict[Path, str] = {}
    for peer_json in local.rglob("peer.json"):
        try:
            checks = read_peer_json(peer_json).checks or {}
        except ValueError as exc:
            log.warning("%s", exc)  # sent as it is: the reporter finds it damaged
            continue
        recorded |= {peer_json.parent / name: check.sha256 for name, check in checks.items()}
    return recorded


def upload_tree(
    server_url: str,
    test_id: str,
    trees: Iterable[tuple[Path, PurePosixPath]],
    *,
    delete: bool = True,
    token: str | None = None,
) -> UploadReport:
    """Upload every file under each local directory to `<remote prefix>/<relative path>`;
    with `delete`, each confirmed file is removed, then the directories left empty."""
    report = UploadReport()
    for local, prefix in trees:
        if not local.is_dir():
            continue
        recorded = recorded_sha256(local)
        for path in sorted(p for p in local.rglob("*") if p.is_file() and not p.name.endswith(".tmp")):
            remote = str(prefix / path.relative_to(local).as_posix())
            try:
                upload_file(server_url, test_id, remote, path, token, sha256=recorded.get(path))
            except UploadError as exc:
                log.error("upload of %s failed: %s", remote, exc)
                report.failed[remote] = str(exc)
                continue
            report.uploaded.append(remote)
            if delete:
                path.unlink()
        if delete:
            for directory in sorted((d for d in local.rglob("*") if d.is_dir()), reverse=True):
                _remove_if_empty(directory)
            _remove_if_empty(local)
    return report


async def upload_with_retries(
    server_url: str, test_id: str, trees: list[tuple[Path, PurePosixPath]], budget_s: float, token: str | None = None
) -> UploadReport:
    """`upload_tree` off the loop; what failed is tried again with backoff (1 s, doubling, at
    most 15 s apart) for `budget_s`. A file is deleted only once the server confirmed it, so what
    never got through stays for a later collection."""
    deadline = time.monotonic() + budget_s
    total = UploadReport()
    pause_s = 1.0
    while True:
        report = await asyncio.to_thread(functools.partial(upload_tree, server_url, test_id, trees, token=token))
        total.uploaded += report.uploaded
        total.failed = report.failed
        if report.ok or time.monotonic() + pause_s > deadline:
            return total
        why = next(iter(report.failed.values()))
        log.warning("%d files not uploaded (%s); trying again in %g s", len(report.failed), why, pause_s)
        await asyncio.sleep(pause_s)
        pause_s = min(pause_s * 2, 15.0)


def _remove_if_empty(directory: Path) -> None:
    # Not empty: something was not confirmed, or someone else writes there.
    with contextlib.suppress(OSError):
        directory.rmdir()

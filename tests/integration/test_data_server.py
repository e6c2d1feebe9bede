"""The data server as peers and people meet it: a real `python -m reports serve` process."""

from __future__ import annotations

import collections
import ctypes
import gzip
import hashlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from support.synthetic import history_run

from coordinator.running.local import LocalCluster
from protocol.file_check import check_files
from protocol.results import PeerRecord, write_peer_json
from protocol.upload import CHECKSUM_HEADER, UploadError, upload_bytes, upload_file, upload_tree
from reports.results_index import DEFAULT_INDEX_FILE


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "root"
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        yield local.data_server(root), root


def put(url: str, path: str, body: bytes, checksum: str | None = None) -> tuple[int, str]:
    headers = {CHECKSUM_HEADER: checksum or hashlib.sha256(body).hexdigest()}
    request = urllib.request.Request(f"{url}/api/results/{path}", data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize(
    "path",
    [
        "t1/files/../escape.txt",
        "t1/files/%2e%2e/escape.txt",
        "t1/files/a/%2e%2e/%2e%2e/escape.txt",
        "t1/files/..%2fescape.txt",
        "t1/files/%2fetc%2fpasswd",
        "t1/files/a%5c..%5cescape.txt",
        "..%2f..%2ftmp/files/escape.txt",
        "%2e%2e/files/escape.txt",
        "t1/files/.hidden",
    ],
)
def test_paths_that_would_leave_the_data_root_are_refused(server: tuple[str, Path], path: str) -> None:
    url, root = server
    status, body = put(url, path, b"x")
    assert status in (400, 404), body
    assert not list(root.parent.rglob("escape.txt"))
    status, _ = get(f"{url}/results/{path.replace('/files/', '/')}")
    assert status in (400, 404)


def test_a_bad_checksum_is_refused_and_leaves_nothing(server: tuple[str, Path]) -> None:
    url, root = server
    status, body = put(url, "t1/files/sender/s1/a.csv.gz", b"payload", checksum="0" * 64)
    assert status == 422 and "checksum mismatch" in body
    assert not [p for p in root.rglob("*") if p.is_file() and p.name != DEFAULT_INDEX_FILE]  # opened at start
    status, body = put(url, "t1/files/a.txt", b"payload", checksum="not-hex")
    assert status == 400 and CHECKSUM_HEADER in body


def test_a_file_is_sent_as_its_peer_recorded_it_or_not_at_all(server: tuple[str, Path], tmp_path: Path) -> None:
    """The uploader sends the SHA-256 peer.json records: bytes changed on the peer's disk after
    it closed the file are refused (422, sent again each attempt), kept locally, and go
    through once they are what the peer wrote."""
    url, root = server
    local = tmp_path / "peer" / "receiver" / "r1"
    local.mkdir(parents=True)
    rows = b"".join(b"%d,%d\n" % (i, i + 1) for i in range(1000))
    (local / "r1-0000.csv.gz").write_bytes(gzip.compress(b"# maestro-rate v1 base_us=0\neta,ata\n" + rows))
    files = ("r1-0000.csv.gz",)
    write_peer_json(local, PeerRecord("r1", "receiver", files=files, checks=check_files(local, files)))
    intact = (local / "r1-0000.csv.gz").read_bytes()
    (local / "r1-0000.csv.gz").write_bytes(intact[: len(intact) // 2])  # cut on the peer's disk

    report = upload_tree(url, "t1", [(tmp_path / "peer", PurePosixPath("."))])
    assert list(report.failed) == ["receiver/r1/r1-0000.csv.gz"], report.failed
    why = report.failed["receiver/r1/r1-0000.csv.gz"]
    assert why.startswith("gave up after 5 attempts: HTTP 422") and "checksum mismatch" in why  # sent again
    assert not (root / "t1" / "receiver" / "r1" / "r1-0000.csv.gz").exists()
    assert (local / "r1-0000.csv.gz").exists()  # nothing lost

    (local / "r1-0000.csv.gz").write_bytes(intact)
    report = upload_tree(url, "t1", [(tmp_path / "peer", PurePosixPath("."))])
    assert report.ok and (root / "t1" / "receiver" / "r1" / "r1-0000.csv.gz").read_bytes() == intact
    assert not local.exists()  # confirmed, so deleted


def test_uploads_are_idempotent_and_never_overwrite_by_accident(server: tuple[str, Path]) -> None:
    url, root = server
    assert put(url, "t1/files/sender/s1/a.txt", b"one")[0] == 201
    status, body = put(url, "t1/files/sender/s1/a.txt", b"one")
    assert status == 200 and json.loads(body)["status"] == "exists"
    status, body = put(url, "t1/files/sender/s1/a.txt", b"two")
    assert status == 409
    assert (root / "t1" / "sender" / "s1" / "a.txt").read_bytes() == b"one"
    upload_bytes(url, "t1", "sender/s1/a.txt", b"two", replace=True)
    assert get(f"{url}/results/t1/sender/s1/a.txt") == (200, b"two")


def test_upload_tree_deletes_only_what_the_server_confirmed(server: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = server
    local = tmp_path / "peer" / "sender" / "s1"
    local.mkdir(parents=True)
    (local / "peer.json").write_text("{}")
    (local / "sender-0000.csv.gz").write_bytes(b"rows")
    (local / "bad name!.txt").write_text("refused by the server")
    report = upload_tree(url, "t2", [(local, PurePosixPath("sender", "s1"))])
    assert sorted(report.uploaded) == ["sender/s1/peer.json", "sender/s1/sender-0000.csv.gz"]
    assert list(report.failed) == ["sender/s1/bad name!.txt"] and "HTTP 400" in report.failed["sender/s1/bad name!.txt"]
    assert [p.name for p in local.iterdir()] == ["bad name!.txt"]  # kept: not confirmed
    listing = json.loads(get(f"{url}/api/results/t2")[1])
    assert [f["path"] for f in listing["files"]] == ["sender/s1/peer.json", "sender/s1/sender-0000.csv.gz"]
    tests = json.loads(get(f"{url}/api/results")[1])
    assert [t["test_id"] for t in tests] == ["t2"]


def test_the_index_lists_every_test_before_any_report_and_its_links_open_them(server: tuple[str, Path]) -> None:
    """A hostile pass of #40: with no report built yet, / was the JSON list (no figures, no
    links); and the index's links, relative to the results folder, were 404s when it was served
    at /."""
    url, root = server
    test_id = history_run(root, "nightly", 1, 1000.0, p99_us=2500.0)
    status, body = get(f"{url}/")
    assert status == 200 and body.startswith(b"<!doctype html>"), body[:200]
    assert f'<a href="{test_id}/test.json">{test_id}</a>'.encode() in body and b"<td>1,000</td>" in body
    status, body = get(f"{url}/{test_id}/test.json")  # the link, followed from /
    assert status == 200 and json.loads(body)["test_id"] == test_id
    assert get(f"{url}/..%2fetc/passwd")[0] == 404


def test_an_unreachable_server_is_retried_then_reported(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("kept")
    with pytest.raises(UploadError, match="gave up after 5 attempts"):
        upload_file("http://127.0.0.1:1", "t1", "a.txt", path)
    assert path.read_text() == "kept"


def test_with_a_token_uploads_need_it_and_reading_stays_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-for-uploads\n")
    token_file.chmod(0o600)
    monkeypatch.setenv("MAESTRO_TOKEN_FILE", str(token_file))  # the server started below reads it
    root = tmp_path / "root"
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        url = local.data_server(root)
        status, body = put(url, "t1/files/a.txt", b"anonymous")
        assert status == 401 and "bearer token" in body
        with pytest.raises(UploadError, match="HTTP 401"):
            upload_bytes(url, "t1", "a.txt", b"wrong", token="not-the-token")
        upload_bytes(url, "t1", "a.txt", b"with the token", token="t0ken-for-uploads")
        assert get(f"{url}/results/t1/a.txt") == (200, b"with the token")
    assert sorted(p.name for p in (root / "t1").iterdir()) == ["a.txt"]


def test_a_token_file_others_may_read_is_refused_before_serving(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    token_file.chmod(0o644)
    serve = subprocess.run(
        [sys.executable, "-m", "reports", "serve", "--data", str(tmp_path / "root"), "--token-file", str(token_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert serve.returncode == 2
    assert serve.stderr.strip() == (
        f"maestro serve: the token file {token_file} may be read by others (mode 0644): chmod 600 {token_file}"
    )


def test_nothing_is_read_listed_or_written_through_a_symlink(server: tuple[str, Path], tmp_path: Path) -> None:
    """#38: a test folder, a subfolder or a file that is a symbolic link (made by whoever can
    write into the data root) leads nowhere, however far out it points."""
    url, root = server
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.token").write_text("the server's secret")
    (outside / "test.json").write_text(json.dumps({"test_id": "linktest", "outcome": "success"}))
    upload_bytes(url, "t1", "a.txt", b"plain")  # the legitimate path, for contrast
    (root / "linktest").symlink_to(outside)
    (root / "t1" / "sub").symlink_to(outside)
    (root / "t1" / "token.txt").symlink_to(outside / "data.token")

    for path in ("linktest/data.token", "linktest/report/index.html", "t1/sub/data.token", "t1/token.txt"):
        status, body = get(f"{url}/results/{path}")
        assert status == 400 and b"symbolic link" in body, (path, body)
    for path in ("linktest", "linktest/summary", "linktest/report"):
        status, body = get(f"{url}/api/results/{path}")
        assert status == 400 and b"symbolic link" in body, (path, body)
    for path in ("linktest/files/x.txt", "t1/files/sub/x.txt", "t1/files/token.txt"):
        status, body = put(url, path, b"written outside?")
        assert status == 400 and "symbolic link" in body, (path, body)
    assert sorted(p.name for p in outside.iterdir()) == ["data.token", "test.json"]
    assert (outside / "data.token").read_text() == "the server's secret"

    assert [t["test_id"] for t in json.loads(get(f"{url}/api/results")[1])] == ["t1"]
    assert [f["path"] for f in json.loads(get(f"{url}/api/results/t1")[1])["files"]] == ["a.txt"]
    assert get(f"{url}/results/t1/a.txt") == (200, b"plain")

    # The results index and a test's record, as links to the outside (a hostile pass served the
    # token as `/` through ROOT/index.html, and an outside outcome through t1/test.json).
    (root / "index.html").symlink_to(outside / "data.token")
    (root / "t1" / "test.json").symlink_to(outside / "test.json")
    status, body = get(f"{url}/")
    assert b"secret" not in body and status == 200 and b"<table" in body, body  # made from test.json instead
    listed = json.loads(get(f"{url}/api/results")[1])
    assert [(t["test_id"], t["outcome"]) for t in listed] == [("t1", None)]
    assert json.loads(get(f"{url}/api/results/t1")[1])["test"] == {}
    assert json.loads(get(f"{url}/api/results/t1/summary")[1])["outcome"] is None


def test_a_folder_flipped_to_a_link_while_it_is_served_and_written_never_leads_out(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    """#38: a check of a path by name, then its use by name, follows a link made between the
    two. With a subfolder flipped between a folder and a link to the outside as fast as this
    machine can, reads, listings and writes through it go out never; the two states are both
    seen (200 and 400), so the race was run."""
    url, root = server
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the server's secret")
    upload_bytes(url, "t1", "sub/secret.txt", b"inside")
    real, link = root / "t1" / "sub", root / "t1" / "swap"
    link.symlink_to(outside)
    stop = threading.Event()
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2

    def flip() -> None:  # renameat2(RENAME_EXCHANGE): `sub` is always a folder or a link, never missing
        while not stop.is_set():
            if libc.renameat2(at_fdcwd, bytes(real), at_fdcwd, bytes(link), rename_exchange) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen: collections.Counter[tuple[int, bytes]] = collections.Counter()
    try:
        for i in range(150):
            status, body = get(f"{url}/results/t1/sub/secret.txt")
            seen[status, body if status == 200 else b""] += 1
            put(url, f"t1/files/sub/new-{i}.txt", b"x")
            status, listing = get(f"{url}/api/results/t1")
            listed = json.loads(listing)["files"] if status == 200 else []
            assert all(f["bytes"] != len("the server's secret") for f in listed), listed  # the outside's file
    finally:
        stop.set()
        flipper.join()
    assert (200, b"the server's secret") not in seen, seen
    assert seen[200, b"inside"] > 0 and sum(n for (status, _), n in seen.items() if status in (400, 404)) > 0, seen
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_only_the_tokens_holders_start_report_builds_at_will(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#38: anonymous readers start at most one report build a minute; the rest are held (202,
    with when to ask again), and a request with the token is never held."""
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-for-builds\n")
    token_file.chmod(0o600)
    monkeypatch.setenv("MAESTRO_TOKEN_FILE", str(token_file))
    root = tmp_path / "root"
    for test_id in ("t-a", "t-b"):
        (root / test_id).mkdir(parents=True)
    with LocalCluster(tmp_path / "logs", broker_url="unused") as local:
        url = local.data_server(root)
        first = json.loads(get(f"{url}/api/results/t-a/report")[1])
        assert first["state"] in ("queued", "building"), first
        try:
            with urllib.request.urlopen(f"{url}/results/t-b/report/summary.json") as response:
                held, retry_after = json.loads(response.read()), int(response.headers["Retry-After"])
        except urllib.error.HTTPError as exc:
            raise AssertionError(exc.read()) from exc
        assert held["state"] == "held" and 30 < retry_after <= 60, (held, retry_after)
        page = get(f"{url}/results/t-b/report/index.html")[1].decode()
        assert 'data-state="held"' in page and "at most once a minute" in page
        with_token = urllib.request.Request(
            f"{url}/api/results/t-b/report", headers={"Authorization": "Bearer t0ken-for-builds"}
        )
        with urllib.request.urlopen(with_token) as response:
            assert json.loads(response.read())["state"] in ("queued", "building")

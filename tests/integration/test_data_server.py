"""The data server as peers and people meet it: a real `python -m reports serve` process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from coordinator.local import LocalCluster
from protocol.upload import CHECKSUM_HEADER, UploadError, upload_bytes, upload_file, upload_tree


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
    assert status == 400 and "checksum mismatch" in body
    assert not [p for p in root.rglob("*") if p.is_file()]
    status, body = put(url, "t1/files/a.txt", b"payload", checksum="not-hex")
    assert status == 400 and CHECKSUM_HEADER in body


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

from __future__ import annotations

from pathlib import Path

import pytest

from reports.paths import UnsafePathError, resolve_inside


@pytest.mark.parametrize(
    ("test_id", "relative", "why"),
    [
        ("..", "", "test id"),
        (".hidden", "", "test id"),
        ("a/b", "", "test id"),
        ("", "", "test id"),
        ("t1", "../x", "not a plain"),
        ("t1", "a/../../x", "not a plain"),
        ("t1", "/etc/passwd", "must be relative"),
        ("t1", "a\\..\\x", "backslashes"),
        ("t1", "a\x00b", "NUL"),
        ("t1", "a/.git/config", "not a plain"),
        ("t1", "a b", "not a plain"),
    ],
)
def test_unsafe_paths_are_refused_with_the_reason(tmp_path: Path, test_id: str, relative: str, why: str) -> None:
    with pytest.raises(UnsafePathError, match=why):
        resolve_inside(tmp_path, test_id, relative)


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root" / "t1").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "t1" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError, match="leaves the test's folder"):
        resolve_inside(tmp_path / "root", "t1", "link/file.txt")


def test_plain_paths_resolve_under_the_test(tmp_path: Path) -> None:
    assert resolve_inside(tmp_path, "t-1.step02", "sender/s1@host/sender-0000.csv.gz") == (
        tmp_path / "t-1.step02" / "sender" / "s1@host" / "sender-0000.csv.gz"
    )

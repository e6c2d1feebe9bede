from __future__ import annotations

import os
from pathlib import Path

import pytest

from reports.paths import UnsafePathError, open_file, open_folder, plain_files, resolve_inside, result_dirs


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
    with pytest.raises(UnsafePathError, match="t1/link is a symbolic link"):
        resolve_inside(tmp_path / "root", "t1", "link/file.txt")


def test_a_symlinked_test_folder_is_refused_with_or_without_a_path_below_it(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "linktest").symlink_to(tmp_path / "outside")
    for relative in ("", "data.token", "new/x.txt"):
        with pytest.raises(UnsafePathError, match="linktest is a symbolic link"):
            resolve_inside(tmp_path / "root", "linktest", relative)
    assert list(result_dirs(tmp_path / "root")) == []


def test_a_symlink_is_refused_even_where_it_stays_inside(tmp_path: Path) -> None:
    # Whether a link's target stays inside could change after the check; no link is the rule.
    (tmp_path / "t2").mkdir()
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "same.txt").symlink_to(tmp_path / "t2" / "missing.txt")
    with pytest.raises(UnsafePathError, match=r"t1/same\.txt is a symbolic link"):
        resolve_inside(tmp_path, "t1", "same.txt")
    assert sorted(d.name for d in result_dirs(tmp_path)) == ["t1", "t2"]


def test_a_file_named_as_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "a.txt").write_text("x")
    with pytest.raises(UnsafePathError, match=r"t1/a\.txt/b"):
        resolve_inside(tmp_path, "t1", "a.txt/b")


def test_plain_paths_resolve_under_the_test(tmp_path: Path) -> None:
    assert resolve_inside(tmp_path, "t-1.step02", "sender/s1@host/sender-0000.csv.gz") == (
        tmp_path / "t-1.step02" / "sender" / "s1@host" / "sender-0000.csv.gz"
    )


def test_a_folder_swapped_for_a_link_after_the_check_is_refused_at_the_open(tmp_path: Path) -> None:
    """#38: a check by name, then an open by name, would follow a link made between the two;
    the descriptor walk refuses it when it opens."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "t1" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside")
    checked = resolve_inside(root, "t1", "sub/secret.txt")  # passes: sub is a folder now
    (root / "t1" / "sub").rmdir()
    (root / "t1" / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="sub is a symbolic link"), open_folder(root, checked.parent):
        pass
    with pytest.raises(UnsafePathError, match="symbolic link"), open_folder(root, checked.parent, create=True):
        pass
    (root / "t1" / "file.txt").symlink_to(outside / "secret.txt")
    with open_folder(root, root / "t1") as folder, pytest.raises(UnsafePathError, match="is a symbolic link"):
        open_file(folder, "file.txt")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_folder_is_made_where_missing_and_its_plain_files_listed_without_links(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("outside")
    with open_folder(root.parent, root / "t1" / "a" / "b", create=True) as folder:
        os.close(open_file(folder, "f.csv", os.O_WRONLY | os.O_CREAT))
    (root / "t1" / "top.json").write_text("{}")
    (root / "t1" / ".upload-1.tmp").write_text("hidden")
    (root / "t1" / "link").symlink_to(outside)
    (root / "t1" / "link.txt").symlink_to(outside / "x.txt")
    with open_folder(root, root / "t1") as folder:
        assert sorted(plain_files(folder)) == [("a/b/f.csv", 0), ("top.json", 2)]

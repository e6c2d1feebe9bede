"""Paths that arrive from the network, checked before they touch the disk.

A test id is one safe word; a file path is relative, made of safe words, and stays inside the
data root. Anything else is refused with the reason, never cleaned up into something that
happens to pass.

No component below the data root may be a symbolic link, the test's folder included: whoever can
write into the root (shared storage, an operator moving a test to another disk) could otherwise
point a name at `/etc` or at the server's token file, and every read, listing and write through
it would leave the root. Each component is looked at with `lstat`, so no link is ever followed
to decide whether it may be followed. (The root itself is the operator's choice, resolved once
when the server starts.)

A check by name and a later open by name leave a gap: a folder swapped for a link between them
is followed by the open. What the data server serves, lists and writes it therefore reaches
through descriptors (`open_folder`, `open_file`): each component opened relative to the one
before with O_NOFOLLOW, so the kernel refuses a link at the moment of use, wherever it came from.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

__all__ = [
    "UnsafePathError",
    "check_test_id",
    "is_plain",
    "open_file",
    "open_folder",
    "plain_files",
    "resolve_inside",
    "result_dirs",
]

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+=-]{0,199}")


class UnsafePathError(ValueError):
    pass


def check_test_id(test_id: str) -> str:
    if not _WORD.fullmatch(test_id):
        raise UnsafePathError(f"test id {test_id!r}: use letters, digits and . _ @ + = - (not first), at most 200")
    return test_id


def resolve_inside(root: Path, test_id: str, relative: str = "") -> Path:
    """`root/test_id/relative`, refused unless every part is a safe word and none of those that
    exist is a symbolic link."""
    base = root / check_test_id(test_id)
    parts: tuple[str, ...] = ()
    if relative:
        if "\\" in relative or "\x00" in relative:
            raise UnsafePathError(f"path {relative!r}: backslashes and NUL are not allowed")
        parts = PurePosixPath(relative).parts
        if relative.startswith("/") or not parts:
            raise UnsafePathError(f"path {relative!r}: must be relative")
        for part in parts:
            if not _WORD.fullmatch(part):
                raise UnsafePathError(f"path {relative!r}: part {part!r} is not a plain file or folder name")
    target = root
    walked: list[str] = []
    for part in (test_id, *parts):
        target = target / part
        walked.append(part)
        try:
            mode = target.lstat().st_mode
        except FileNotFoundError:
            break  # nothing below a missing name exists yet, so no link either
        except OSError as exc:  # e.g. a file where a folder is named
            raise UnsafePathError(f"{'/'.join(walked)}: {exc.strerror or exc}") from exc
        if stat.S_ISLNK(mode):
            raise UnsafePathError(f"{'/'.join(walked)} is a symbolic link, which may lead out of the data root")
    return base.joinpath(*parts)


@contextlib.contextmanager
def open_folder(root: Path, path: Path, *, create: bool = False) -> Iterator[int]:
    """A descriptor of folder `path` (under `root`, as `resolve_inside` made it), opened one
    component at a time without following a link; `create`: missing folders are made (0755).
    FileNotFoundError where a folder is missing, UnsafePathError where a component is a link
    or no folder."""
    fd = os.open(root, _FOLDER_FLAGS)
    try:
        for part in path.relative_to(root).parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePathError(f"{part} is a symbolic link or no folder") from exc
                raise
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def open_file(folder_fd: int, name: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of file `name` in the folder `folder_fd`, never through a link
    (UnsafePathError for a link)."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{name} is a symbolic link") from exc
        raise


def plain_files(folder_fd: int) -> Iterator[tuple[str, int]]:
    """(path relative to the folder, bytes) of every regular file below it, hidden names and
    links left out (neither is served), walked through descriptors."""
    for where, folders, files, fd in os.fwalk(".", dir_fd=folder_fd, follow_symlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                yield os.path.normpath(os.path.join(where, name)), info.st_size


def is_plain(path: Path) -> bool:
    """A file or folder that is itself no symbolic link (a listing shows no link's target)."""
    return not path.is_symlink() and not path.name.startswith(".")


def result_dirs(root: Path) -> Iterator[Path]:
    """The tests' folders in a data root: neither hidden nor symbolic links (resolve_inside)."""
    for directory in root.iterdir():
        if is_plain(directory) and directory.is_dir():
            yield directory

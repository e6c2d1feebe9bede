"""Paths that arrive from the network, checked before they touch the disk.

A test id is one safe word; a file path is relative, made of safe words, and resolves inside
the data root. Anything else is refused with the reason, never cleaned up into something that
happens to pass.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

__all__ = ["UnsafePathError", "check_test_id", "resolve_inside"]

_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+=-]{0,199}")


class UnsafePathError(ValueError):
    pass


def check_test_id(test_id: str) -> str:
    if not _WORD.fullmatch(test_id):
        raise UnsafePathError(f"test id {test_id!r}: use letters, digits and . _ @ + = - (not first), at most 200")
    return test_id


def resolve_inside(root: Path, test_id: str, relative: str = "") -> Path:
    """`root/test_id/relative`, refused unless every part is a safe word and the result, with
    symlinks resolved, stays inside `root/test_id`."""
    base = root / check_test_id(test_id)
    if not relative:
        return base
    if "\\" in relative or "\x00" in relative:
        raise UnsafePathError(f"path {relative!r}: backslashes and NUL are not allowed")
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or not parts:
        raise UnsafePathError(f"path {relative!r}: must be relative")
    for part in parts:
        if not _WORD.fullmatch(part):
            raise UnsafePathError(f"path {relative!r}: part {part!r} is not a plain file or folder name")
    target = base.joinpath(*parts)
    if not target.resolve().is_relative_to(base.resolve()):
        raise UnsafePathError(f"path {relative!r}: leaves the test's folder")
    return target

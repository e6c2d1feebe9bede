"""Passwords out of everything a test leaves behind: files, notes' echoes, logs.

Daemons need the password of a URL to connect, so it stays in the parsed options they use; every
copy that is kept or shown (peer.json, test.json, junit.xml, a stored definition, STATS and GET
answers) goes through `redact` first, which turns `scheme://user:password@host` into
`scheme://user:***@host` wherever it occurs, however deep in a structure.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "KEY_FILE_ENV",
    "TOKEN_FILE_ENV",
    "SecretFileError",
    "env_path",
    "exposed",
    "read_secret_file",
    "read_token_file",
    "redact",
    "redact_text",
]

# Where the note-signing key and the data server's token are, when no flag says.
KEY_FILE_ENV = "MAESTRO_KEY_FILE"
TOKEN_FILE_ENV = "MAESTRO_TOKEN_FILE"

# How deep exposed() follows @FILEs named in @FILEs: NAME.args naming NAME.broker is one level,
# and files that name each other must not recurse forever.
_MAX_NESTED_FILES = 4

# scheme://user:password@host — the password runs to the last @ before the host, as urlsplit
# reads it (a literal @ should be percent-encoded, but a sloppy one must not leak half of it).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)(?P<password>[^\s/]+)@")


def redact_text(text: str) -> str:
    return _URL_PASSWORD.sub(r"\g<head>***@", text)


def redact(value: Any) -> Any:
    """The same structure with every URL password in its strings replaced by `***`."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(item) for item in value)
    return value


class SecretFileError(ValueError):
    """A key or token file that cannot be used; the message says why and what to do."""


def read_secret_file(path: Path, what: str, min_bytes: int = 1) -> bytes:
    """The secret in `path`, without surrounding whitespace. Refused, as ssh refuses a private
    key, when others than its owner may read it: a secret that anyone on the host can read
    protects nothing."""
    try:
        mode = path.stat().st_mode
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise SecretFileError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from exc
    if mode & 0o077:
        raise SecretFileError(
            f"the {what} file {path} may be read by others (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
        )
    if len(secret) < min_bytes:
        raise SecretFileError(f"the {what} file {path} holds {len(secret)} bytes; it needs at least {min_bytes}")
    return secret


def read_token_file(path: Path) -> str:
    """The data server's bearer token in `path` (read_secret_file's rules; printable ASCII)."""
    token = read_secret_file(path, "token")
    if not all(0x21 <= byte <= 0x7E for byte in token):
        raise SecretFileError(f"the token file {path} must hold one word of printable ASCII")
    return token.decode()


def exposed(secret: str, command_line: Sequence[str], _depth: int = 0) -> str | None:
    """Why `secret` is exposed by the way this command line gives it, or None: on the command line
    itself, which `ps` shows every user of the host for as long as the process runs, or in an
    @FILE of arguments that others than its owner may read (an @FILE may name another, as
    `--broker @NAME.broker` in NAME.args does: argparse reads that one too)."""
    for arg in command_line:
        if not arg.startswith("@"):
            if _depth == 0 and secret in arg:
                return "is on the command line, where ps shows it to every user of this host"
            continue
        path = Path(arg[1:])
        try:
            text = path.read_text(errors="replace")
            mode = path.stat().st_mode
        except OSError:
            continue  # argparse says what is wrong with the file
        if secret in text and mode & 0o077:
            return f"is in {path}, which others may read (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
        if _depth < _MAX_NESTED_FILES and (why := exposed(secret, text.splitlines(), _depth + 1)):
            return why
    return None


def env_path(name: str) -> Path | None:
    """A file named by an environment variable ($MAESTRO_KEY_FILE, $MAESTRO_TOKEN_FILE), if set."""
    value = os.environ.get(name)
    return Path(value) if value else None

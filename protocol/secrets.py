"""Passwords out of everything a test leaves behind: files, notes' echoes, logs.

Daemons need the password of a URL to connect, so it stays in the parsed options they use; every
copy that is kept or shown (peer.json, test.json, junit.xml, a stored definition, STATS and GET
answers) goes through `redact` first, which turns `scheme://user:password@host` into
`scheme://user:***@host` wherever it occurs, however deep in a structure.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["redact", "redact_text"]

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

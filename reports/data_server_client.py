"""What the commands read from a data server over HTTP (`--server URL`): one GET of JSON."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["DataServerError", "get_json"]


class DataServerError(ValueError):
    """The server could not be read, or answered an error other than 404: the URL and why."""


def get_json(url: str, timeout_s: float = 60) -> Any | None:
    """The JSON at `url`; None where the server has nothing there (404)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise DataServerError(f"{url} answered {exc.code}: {exc.read().decode(errors='replace')[:300]}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise DataServerError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from exc

"""A request's JSON body, bounded in size, or HTTP 413/400 saying why not."""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException, Request

__all__ = ["json_body"]


async def json_body(request: Request, max_bytes: int, what: str) -> Any:
    body = await request.body()
    if len(body) > max_bytes:
        raise HTTPException(413, f"{what} larger than {max_bytes} bytes")
    try:
        # NaN and Infinity are not JSON (RFC 8259), though Python's parser takes them.
        return json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:
        raise HTTPException(400, f"the body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise HTTPException(400, "the body is nested too deeply") from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")

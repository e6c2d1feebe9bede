"""The data server's one secret: uploads and live updates carry its bearer token, when it has one."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

__all__ = ["carries_token", "check_token"]


def carries_token(request: Request) -> bool:
    """Whether the request carries the server's token (never, when the server has none)."""
    token: bytes | None = request.app.state.token
    if token is None:
        return False
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


def check_token(request: Request) -> None:
    if request.app.state.token is not None and not carries_token(request):
        raise HTTPException(
            401,
            "this data server takes uploads, live updates and stops only with its bearer token (the "
            "daemons' and the coordinator's --token-file)",
            headers={"WWW-Authenticate": "Bearer"},
        )

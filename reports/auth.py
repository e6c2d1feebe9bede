"""The data server's one secret: uploads and live updates carry its bearer token, when it has one."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

__all__ = ["check_token"]


def check_token(request: Request) -> None:
    token: bytes | None = request.app.state.token
    if token is None:
        return
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
        raise HTTPException(
            401,
            "this data server takes uploads only with its bearer token (the daemons' and the coordinator's "
            "--token-file)",
            headers={"WWW-Authenticate": "Bearer"},
        )

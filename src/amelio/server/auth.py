"""Bearer API keys with roles, as a FastAPI dependency.

``admin`` may do everything, ``bot`` chats and sends feedback, ``client`` only
sends feedback events. Routes declare the roles they accept with
:func:`require`; ``admin`` is always accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from amelio.errors import AuthError, Forbidden
from amelio.keys import ApiKey, authenticate

__all__ = ["require"]

_bearer = HTTPBearer(auto_error=False, description="An Amelio API key: `amelio keys create`.")


def require(*roles: str) -> Callable[..., ApiKey]:
    """A dependency that returns the caller's key if its role is one of ``roles``."""
    allowed = {"admin", *roles}

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> ApiKey:
        if credentials is None:
            raise AuthError("Missing API key: send `Authorization: Bearer <key>` "
                            "(create one with `amelio keys create`).")
        key = authenticate(request.app.state.workspace.engine, credentials.credentials)
        if key is None:
            raise AuthError("Invalid or revoked API key.")
        if key.role not in allowed:
            raise Forbidden(
                f"A {key.role!r} key cannot do this; it needs one of: "
                f"{', '.join(sorted(allowed))}.",
                role=key.role,
            )
        return key

    return dependency

"""Bearer API keys with roles and project scopes, as FastAPI dependencies.

``admin`` may do everything, ``bot`` chats and sends feedback, ``client`` only
sends feedback events. Routes declare the roles they accept with
:func:`require`; ``admin`` is always accepted.

A key bound to projects reaches those projects only. Every route that names a
project (in its path, query or body) passes it through :func:`authorize_project`,
and every route that loads a thing by id checks the thing's project the same way,
so a scoped key meets 403 on another project whatever way it asks. Only admin
keys create projects by naming a new one: for any other key an unknown project
is 404, so a bot key cannot grow the workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, TypeVar

import sqlalchemy as sa
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from amelio.errors import AuthError, Forbidden
from amelio.workspace.keys import ApiKey, authenticate
from amelio.workspace.projects import require_project, validate_name

__all__ = ["authorize_project", "require", "visible"]

bearer = HTTPBearer(auto_error=False, description="An Amelio API key: `amelio keys create`.")
T = TypeVar("T")


def require(*roles: str) -> Callable[..., ApiKey]:
    """A dependency that returns the caller's key if its role is one of ``roles``."""
    allowed = {"admin", *roles}

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> ApiKey:
        if credentials is None:
            raise AuthError(
                "Missing API key: send `Authorization: Bearer <key>` "
                "(create one with `amelio keys create`)."
            )
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


def authorize_project(engine: sa.Engine, key: ApiKey, project: str) -> str:
    """``project`` if ``key`` may use it: 422 for a bad name, 403 outside the key's
    scope, 404 when it does not exist and the key is not an admin's."""
    validate_name(project)
    if not key.allows(project):
        raise Forbidden(
            f"This key is bound to {', '.join(key.projects)}; it cannot use project {project!r}.",
            project=project,
        )
    if key.role != "admin":
        require_project(engine, project)  # ProjectNotFound (404) names the fix
    return project


def visible(key: ApiKey, items: Iterable[T], project_of: Callable[[T], str]) -> list[T]:
    """The ``items`` a key may see, for listings that span every project."""
    return [item for item in items if key.allows(project_of(item))]

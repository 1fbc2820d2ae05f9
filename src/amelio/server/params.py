"""Request parameters every area shares, bounded where they are declared.

Bounds live in the types, not in the handlers, so they are enforced before any
handler runs and they show in the OpenAPI document: a project name has the
safe alphabet of :func:`amelio.workspace.projects.validate_name`, and an id fits the
database key it is looked up in (a larger one would overflow the driver, not
find nothing).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import Field

__all__ = [
    "MAX_ID",
    "PROJECT_PATTERN",
    "Id",
    "OptionalProjectQuery",
    "ProjectField",
    "ProjectQuery",
]

#: The largest database id: keys are ``INTEGER`` columns, 32-bit on PostgreSQL
#: (SQLite's hold 64 bits, but an id past this can never have been issued there
#: either while both databases stay interchangeable).
MAX_ID = 2**31 - 1
#: The alphabet of project names (``amelio.workspace.projects.validate_name``), for OpenAPI.
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,99}$"
_PROJECT_HELP = "Project (tenant): 1-100 lowercase letters, digits, '-' or '_'."

Id = Annotated[int, Path(ge=1, le=MAX_ID, description="A numeric id.")]
ProjectQuery = Annotated[
    str, Query(pattern=PROJECT_PATTERN, max_length=100, description=_PROJECT_HELP)
]
OptionalProjectQuery = Annotated[
    str | None,
    Query(
        pattern=PROJECT_PATTERN,
        max_length=100,
        description=_PROJECT_HELP + " All the caller may see if absent.",
    ),
]


ProjectField = Annotated[
    str, Field(pattern=PROJECT_PATTERN, max_length=100, description=_PROJECT_HELP)
]

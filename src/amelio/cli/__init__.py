"""The ``amelio`` command: parse, call one library function, print.

Errors Amelio raises on purpose print as ``Error: <message>`` and exit 1; usage
errors exit 2 (click's convention). Commands that print data take ``--json``.
Each area's commands live in their own module and attach to :data:`main`.
"""

from amelio.cli import (  # noqa: F401  (they register commands)
    admin,
    assistant,
    context,
    evals,
    feedback,
    improve,
    knowledge,
    mcp,
    ops,
    sage,
    search,
    skills,
    vespa,
)
from amelio.cli._common import main

__all__ = ["main"]

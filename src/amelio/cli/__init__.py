"""The ``amelio`` command: parse, call one library function, print.

Errors Amelio raises on purpose print as ``Error: <message>`` and exit 1; usage
errors exit 2 (click's convention). Commands that print data take ``--json``.
Each area's commands live in their own module and attach to :data:`main`; the
root group imports a module only when one of its commands runs (see
:data:`amelio.cli._common.COMMANDS`), so ``amelio --help`` starts fast.
"""

from amelio.cli._common import main

__all__ = ["main"]

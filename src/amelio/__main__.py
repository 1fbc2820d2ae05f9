"""``python -m amelio`` is the ``amelio`` command."""

from amelio.cli import main

main()

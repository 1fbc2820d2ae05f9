"""Amelio: assistants and search that improve from their own use."""

from __future__ import annotations

from amelio.errors import AmelioError

__version__ = "0.1.0"

__all__ = ["AmelioError", "__version__"]

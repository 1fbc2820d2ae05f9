"""Amelio's version, in a module of its own: what records it (backups, exports,
traces, the API) imports it from here without loading the curated API in
``amelio/__init__.py``, and the build reads it from here (``[tool.hatch.version]``)."""

__version__ = "0.1.0"

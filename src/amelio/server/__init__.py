"""The HTTP service: a thin layer over the library (nothing imports it back)."""

from amelio.server.app import create_app

__all__ = ["create_app"]

"""The demo behind ``make demo``."""

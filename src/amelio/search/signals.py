"""Signals: the counts of what people did with each (normalized query, docId).

:mod:`amelio.search.aggregation` computes them from the impression and feedback
event logs and :mod:`amelio.search.counts` holds and reads them; this module
keeps the names callers have always imported from here, the click model's
(:mod:`amelio.search.clickmodel`) included.
"""

from __future__ import annotations

from amelio.search.aggregation import aggregate, rebuild
from amelio.search.clickmodel import (
    Propensities,
    SwapCounts,
    fit_pbm,
    load_propensities,
    utility,
)
from amelio.search.counts import AggregateReport, SignalRow, busiest_queries, signals_for

__all__ = ["AggregateReport", "Propensities", "SignalRow", "SwapCounts", "aggregate",
           "busiest_queries", "fit_pbm", "load_propensities", "rebuild", "signals_for",
           "utility"]

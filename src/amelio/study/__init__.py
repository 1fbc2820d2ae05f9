"""``amelio study``: does the skill loop make an assistant better? Measured.

A suite (:mod:`amelio.study.suite`) holds starting skills, tasks split into
``train`` and ``test``, and an oracle: eval rules that say what each skill's users
want, never shown to the assistant. Simulated users judge train answers by it and
give 👎, Fix-Its and 👍 the way people do; held-out test answers only measure.
Arms (:mod:`amelio.study.runner`) run the same tasks with no skills, with the
skills, with the oracle told up front (the ceiling), with learnings from feedback,
and with the whole loop; the report (:mod:`amelio.study.report`) gives each
round's pass rate and the paired differences with bootstrap intervals. See
docs/efficacy.md.
"""

from __future__ import annotations

from amelio.study.llm import StudyLLM, StudyStopped
from amelio.study.report import write_report
from amelio.study.runner import ARMS, StudyOptions, StudyResult, run_study, total_steps
from amelio.study.suite import Suite, Task, load_suite

__all__ = [
    "ARMS",
    "StudyLLM",
    "StudyOptions",
    "StudyResult",
    "StudyStopped",
    "Suite",
    "Task",
    "load_suite",
    "run_study",
    "total_steps",
    "write_report",
]

"""Binary eval rules: declarative pass/fail checks on an answer, with no AI in the loop.

The public face of the rules' vocabulary (:mod:`amelio.evals.rules`) and of the
engine (:mod:`amelio.evals.engine`). A plugin that adds rule types imports what it
needs from here: :class:`RuleType`, :class:`Verdict`, :class:`RuleParamError`,
:func:`charge` and :func:`json_kind`. Batch runs (:mod:`amelio.evals.batch`) and
the promptfoo import (:mod:`amelio.evals.promptfoo`) are imported where used.
"""

from amelio.evals.engine import (
    append_footnotes,
    evaluate,
    parse_eval_file,
    parse_rules,
    render_footnotes,
    rule_types,
)
from amelio.evals.rules import (
    DEFAULT_SEVERITY,
    MAX_RULES,
    MAX_TEXT_CHARS,
    SEVERITIES,
    WORK_BUDGET,
    Check,
    EvalReport,
    EvalResult,
    EvalRule,
    EvalSpec,
    RuleParamError,
    RuleType,
    Verdict,
    WorkBudgetExceeded,
    charge,
    json_kind,
)

__all__ = [
    "DEFAULT_SEVERITY",
    "MAX_RULES",
    "MAX_TEXT_CHARS",
    "SEVERITIES",
    "WORK_BUDGET",
    "Check",
    "EvalReport",
    "EvalResult",
    "EvalRule",
    "EvalSpec",
    "RuleParamError",
    "RuleType",
    "Verdict",
    "WorkBudgetExceeded",
    "append_footnotes",
    "charge",
    "evaluate",
    "json_kind",
    "parse_eval_file",
    "parse_rules",
    "render_footnotes",
    "rule_types",
]

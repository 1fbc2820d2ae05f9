"""Shadow traffic: a share of live requests answered again by a candidate model, after
the user has their answer, checked by the same rules and stored for comparison.

With ``shadow_model`` set and ``shadow_rate`` above 0, :func:`maybe_shadow` (which
:mod:`amelio.assistant.respond` calls once the interaction is stored) draws; on a
hit it hands the very request the live model got, with the candidate model, to a
small pool of background threads, and returns at once. The shadow answer is never
shown: it is checked by the applied skill's rules and stored in
``shadow_answers``, which ``amelio bench --model NAME --shadow`` reads
(:func:`amelio.improve.model_check.compare_shadow`).

At most :data:`MAX_PENDING` shadow requests wait at a time: beyond that a draw is
dropped and counted (``dropped()``), so a slow candidate never queues work without
bound or slows the live path. A shadow call that fails stores its error.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from amelio import db
from amelio.db.schema import interactions, shadow_answers, utcnow

if TYPE_CHECKING:
    from amelio.llm import LLMRequest
    from amelio.skills.model import Skill
    from amelio.workspace.folder import Workspace

__all__ = ["MAX_PENDING", "dropped", "maybe_shadow", "wait_idle"]

log = logging.getLogger(__name__)

#: Shadow requests in flight or queued, at most; more are dropped.
MAX_PENDING = 16
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="amelio-shadow")
_SLOTS = threading.BoundedSemaphore(MAX_PENDING)
_STATE = {"dropped": 0, "pending": 0}
_LOCK = threading.Lock()
_IDLE = threading.Condition(_LOCK)


def dropped() -> int:
    """Shadow draws dropped because :data:`MAX_PENDING` were waiting."""
    return _STATE["dropped"]


def wait_idle(timeout: float = 30.0) -> bool:
    """Wait until no shadow request is pending (tests, benchmarks, shutdown)."""
    deadline = time.monotonic() + timeout
    with _IDLE:
        while _STATE["pending"]:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _IDLE.wait(left)
    return True


def maybe_shadow(
    ws: Workspace,
    request: LLMRequest,
    applied: Skill | None,
    interaction_id: int,
    rng: random.Random | None = None,
) -> bool:
    """Send this request to the shadow model in the background, at ``shadow_rate``;
    whether it was sent. Never raises: the live answer is already made."""
    settings = ws.settings
    if not settings.shadow_model or settings.shadow_rate <= 0:
        return False
    if (rng or random).random() >= settings.shadow_rate:
        return False
    if not _SLOTS.acquire(blocking=False):
        with _LOCK:
            _STATE["dropped"] += 1
        return False
    with _LOCK:
        _STATE["pending"] += 1
    try:
        _POOL.submit(_run, ws, request, applied, interaction_id)
    except RuntimeError:  # the pool is shut down (interpreter exit)
        _done()
        return False
    return True


def _done() -> None:
    _SLOTS.release()
    with _IDLE:
        _STATE["pending"] -= 1
        _IDLE.notify_all()


def _run(
    ws: Workspace,
    request: LLMRequest,
    applied: Skill | None,
    interaction_id: int,
) -> None:
    import sqlalchemy as sa

    from amelio import evals
    from amelio.errors import AmelioError
    from amelio.llm import get_provider, settings_for_model

    started = time.perf_counter()
    row: dict[str, Any] = {
        "interaction_id": interaction_id,
        "skill": applied.name if applied else None,
        "model": ws.settings.shadow_model,
        "answer": "",
        "success": False,
        "passed_share": 0.0,
        "failed_rules": [],
        "error": None,
    }
    try:
        # As respond() does, a provider per answer: a local model is loaded once per
        # process by its provider, a served one costs a client.
        provider = get_provider(
            settings_for_model(ws.settings, ws.settings.shadow_model), purpose="Shadow"
        )
        completion = provider.complete(request)
        rules = evals.parse_rules(list(applied.spec.evals or ())) if applied else ()
        report = evals.evaluate(completion.text, rules)
        share = report.passed_share
        row |= {
            "answer": completion.text,
            "success": report.success,
            "passed_share": 1.0 if share is None else share,
            "failed_rules": [r.rule_id for r in report.failed],
        }
    except AmelioError as exc:
        row["error"] = exc.message[:2000]
    except Exception as exc:  # a shadow must never take a worker down
        log.exception("shadow answer failed")
        row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        row["latency_ms"] = (time.perf_counter() - started) * 1000
        row["created_at"] = utcnow()
        with db.transaction(ws.engine) as conn:
            row["project_id"] = conn.scalar(
                sa.select(interactions.c.project_id).where(interactions.c.id == interaction_id)
            )
            if row["project_id"] is not None:  # None: the interaction was deleted meanwhile
                conn.execute(shadow_answers.insert().values(**row))
    except Exception:
        log.exception("shadow answer not stored")
    finally:
        _done()

"""Verdicts: whether results agree, when the server checks them itself, and what
accepting or rejecting one writes.

* **Verification** (:class:`Verifier`) decides, outside any transaction (a check
  embeds): a result is accepted when an independent client's result agrees (every
  vector's cosine at least ``contributions_tolerance``), or when the server's own
  embedding does (a spot-check: every disagreement, results of related clients, a
  result no independent client matched in time, and a random
  ``contributions_spot_check`` share of agreements). A result of a client on
  probation is first checked on a sample of its texts (:data:`PROBATION_SAMPLE`).
* **Settling** (:func:`settle`) applies what was decided under the task's row lock:
  the task moves ``open → accepted`` by one conditional update, then its vectors go
  into the store with :meth:`DocumentStore.put_vectors`: applied once. When a
  document changed since the task was made (its current text no longer matches) the
  task is cancelled and nothing is written; one that changes as the vectors go in is
  skipped by the store's own check of the texts, and tasked again. Each result
  judged moves its client's trust (:mod:`~amelio.contributions.trust`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from prometheus_client import Counter

from amelio.contributions.leases import TASKS, cancel, is_current
from amelio.contributions.trust import TRUST_GAIN, TRUST_PENALTY, Contributor, related
from amelio.db.schema import (
    contribution_clients,
    contribution_results,
    contribution_task_docs,
    contribution_tasks,
)
from amelio.ops.metrics import REGISTRY

if TYPE_CHECKING:
    import random

    import numpy as np
    import numpy.typing as npt

    from amelio.search.store import DocumentStore
    from amelio.workspace.config import Settings

__all__ = [
    "PROBATION_SAMPLE",
    "WAITING",
    "Outcome",
    "Pending",
    "Verdict",
    "Verifier",
    "settle",
]

log = logging.getLogger("amelio.contributions")

#: Texts of a result of a client on probation that the server embeds to check it,
#: drawn at random: a forger must have every one of them right to pass, and one that
#: passes still needs an independent client's agreement to be accepted. A task of
#: no more texts is checked whole, and judged at once.
PROBATION_SAMPLE = 8
WAITING = "Waiting for a second client's result for this task."

SPOT_CHECKS = Counter(
    "amelio_contributions_spot_checks_total",
    "Contributed results the server checked by embedding the texts itself, by cause "
    "(random, disagreement, late, probation, related, lonely).",
    ["cause"],
    registry=REGISTRY,
)


def _agree(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], tolerance: float) -> bool:
    """Every row of ``a`` has cosine at least ``tolerance`` with the same row of ``b``."""
    import numpy as np

    if a.shape != b.shape:
        return False
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if not np.all(norms > 0):
        return False
    return bool(np.all(np.sum(a * b, axis=1) / norms >= tolerance))


@dataclass(frozen=True)
class Pending:
    """A result being verified: its row, client (as the result was recorded), status
    and vectors."""

    id: int
    who: Contributor
    status: str
    vectors: npt.NDArray[np.float32]

    @property
    def client_id(self) -> str:
        return self.who.id


@dataclass(frozen=True)
class Verdict:
    """What becomes of one pending result, and whether the server's own embedding
    decided it (what ends a client's probation, when accepted)."""

    status: str  # accepted | rejected | cancelled
    reason: str
    checked: bool = False


@dataclass(frozen=True)
class Outcome:
    """What verifying one result decided: verdicts for it and the task's other pending
    results (none: it waits), the vectors to store, the cause of the server's check if
    one ran, whether two clients disagreed, and the results on probation whose sampled
    check passed (their verdicts, if any, came from peers)."""

    verdicts: dict[int, Verdict] = dataclasses.field(default_factory=dict)
    vectors: npt.NDArray[np.float32] | None = None
    cause: str | None = None
    disagreed: bool = False
    sampled: tuple[int, ...] = ()


def _checked(right: bool) -> Verdict:
    """The verdict of the server's own embedding on a result."""
    if right:
        return Verdict("accepted", "The server's spot-check agrees.", checked=True)
    return Verdict("rejected", "The server's spot-check proved this result wrong.", checked=True)


# -- verification -----------------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """Decides what becomes of results, as ``settings`` say: ``rng`` draws the random
    spot-checks and probation samples, ``embed(texts, model)`` is the server's own
    embedding (a spot-check)."""

    settings: Settings
    rng: random.Random
    embed: Callable[[Sequence[str], str], npt.NDArray[np.float32]]

    def verify(
        self, task: sa.Row[Any], mine: Pending, others: list[Pending], *, lonely: bool = False
    ) -> Outcome:
        """What becomes of this result and the task's other pending ones. Runs outside
        any transaction: a check embeds.

        Agreement accepts only between independent clients. The server embeds the
        texts itself for a disagreement, for related clients' results (two of one
        party: their agreement proves nothing), for a ``lonely`` result no independent
        client came to match, and at random. A result of a client on probation is
        checked on :data:`PROBATION_SAMPLE` of its texts (all of a task that small:
        then it is judged at once); one that passes still needs an independent
        client's agreement to be accepted, and counts towards the end of probation."""
        tolerance = self.settings.contributions_tolerance
        window = self.settings.contributions_related_seconds * 1000
        new = mine.who.on_probation(self.settings.contributions_probation)
        texts = task.input["texts"]
        if task.state == "cancelled":
            reason = f"The task was cancelled: {task.reason}."
            return Outcome({mine.id: Verdict("cancelled", reason)})
        if task.state == "accepted":  # a late result: judged against the accepted one
            return self._verify_late(task, mine, others, new)
        pending = [o for o in others if o.status == "pending"]
        disagreed = any(not _agree(mine.vectors, o.vectors, tolerance) for o in pending)
        cause: str | None = None
        if any(related(mine.who, p.who, window) for p in pending):
            cause = "related"
        elif disagreed:
            cause = "disagreement"
        elif new and len(texts) <= PROBATION_SAMPLE:
            cause = "probation"  # the sample is the whole task: judged at once
        elif not pending and lonely:
            cause = "lonely"
        sampled: tuple[int, ...] = ()
        if cause is None and new:
            if not self._sample_agrees(task, mine):
                return Outcome({mine.id: _checked(False)}, cause="probation")
            sampled = (mine.id,)
        if cause is None:
            if not pending:  # wait for an independent second client
                return Outcome(cause="probation" if sampled else None, sampled=sampled)
            if self.rng.random() >= self.settings.contributions_spot_check:
                verdict = Verdict("accepted", "Another client's result agrees.")
                return Outcome(
                    {p.id: verdict for p in (mine, *pending)},
                    mine.vectors,
                    cause="probation" if sampled else None,
                    sampled=sampled,
                )
            cause = "random"
        truth = self.embed(texts, task.model)
        verdicts = {p.id: _checked(_agree(p.vectors, truth, tolerance)) for p in (mine, *pending)}
        right = any(v.status == "accepted" for v in verdicts.values())
        return Outcome(verdicts, truth if right else None, cause, disagreed)

    def _verify_late(
        self, task: sa.Row[Any], mine: Pending, others: list[Pending], new: bool
    ) -> Outcome:
        """A result for a task already accepted: it agrees with the accepted vectors
        (and, on probation, passes its sample), or the server checks it in full."""
        tolerance = self.settings.contributions_tolerance
        window = self.settings.contributions_related_seconds * 1000
        texts = task.input["texts"]
        done = [o for o in others if o.status == "accepted"]
        agrees = bool(done) and _agree(mine.vectors, done[0].vectors, tolerance)
        if agrees and not related(mine.who, done[0].who, window):
            already = Verdict(
                "accepted", "The task was already done; this result agrees with the accepted one."
            )
            if not new:
                return Outcome({mine.id: already})
            if len(texts) > PROBATION_SAMPLE:
                if self._sample_agrees(task, mine):
                    return Outcome({mine.id: already}, cause="probation", sampled=(mine.id,))
                return Outcome({mine.id: _checked(False)}, cause="probation")
        right = _agree(mine.vectors, self.embed(texts, task.model), tolerance)
        if right and done and not agrees:
            log.warning(
                "contributions: task %s was accepted with vectors the server's "
                "own embedding disagrees with",
                task.id,
            )
        return Outcome(
            {mine.id: _checked(right)},
            cause="probation" if new else "late",
            disagreed=bool(done) and not agrees,
        )

    def _sample_agrees(self, task: sa.Row[Any], result: Pending) -> bool:
        """Whether :data:`PROBATION_SAMPLE` of the task's texts, drawn at random, have
        the server's own vectors in ``result``."""
        texts = task.input["texts"]
        rows = sorted(self.rng.sample(range(len(texts)), min(PROBATION_SAMPLE, len(texts))))
        truth = self.embed([texts[i] for i in rows], task.model)
        return _agree(result.vectors[rows], truth, self.settings.contributions_tolerance)


# -- settling ---------------------------------------------------------------------------


def settle(
    conn: sa.Connection,
    store: DocumentStore,
    task_id: str,
    mine: Pending,
    owners: dict[int, str],
    outcome: Outcome,
    now: int,
) -> tuple[str, str, float]:
    """Apply the outcome under the task's row lock: write the vectors to ``store``
    (once), judge each result still pending, move trust, count the probation checks
    passed. This result's status, reason, and its client's trust. ``owners`` maps
    result ids to their clients (what the submit read, so they need no second read)."""
    t, r, cl = contribution_tasks.c, contribution_results.c, contribution_clients.c
    verdicts, vectors = outcome.verdicts, outcome.vectors
    checked, disagreed, sampled = outcome.cause, outcome.disagreed, outcome.sampled
    task = conn.execute(
        sa.select(contribution_tasks).where(t.id == task_id).with_for_update(key_share=True)
    ).one()
    if not conn.scalar(
        sa.select(sa.func.count()).where(r.id.in_({*verdicts, *sampled}), r.status == "pending")
    ):
        # Settled meanwhile (a retry or a lease healed the task as this submit ran):
        # the vectors, checks and trust were applied then, and are not again.
        verdicts, vectors, checked, disagreed, sampled = {}, None, None, False, ()
    if vectors is not None and not _accept(conn, store, task, vectors, now):
        why = "its documents changed since the task was made"
        verdicts = {i: Verdict("cancelled", f"The task was cancelled: {why}.") for i in verdicts}
    if checked or disagreed:
        conn.execute(
            contribution_tasks.update()
            .where(t.id == task_id)
            .values(
                spot_checks=t.spot_checks + (1 if checked else 0),
                disagreements=t.disagreements + (1 if disagreed else 0),
            )
        )
        if checked:
            SPOT_CHECKS.labels(checked).inc()
    settled: tuple[str, str, float] | None = None
    for result_id in sorted({*verdicts, *sampled}, key=lambda i: owners.get(i, "")):
        client_id = owners.get(result_id)  # one pass in the clients' order: lock order
        if result_id not in verdicts:  # a probation sample passed; the result waits
            if client_id is not None:
                conn.execute(
                    contribution_clients.update()
                    .where(cl.id == client_id)
                    .values(checked=cl.checked + 1)
                )
            continue
        verdict = verdicts[result_id]
        trust = _judge(conn, result_id, client_id, verdict, result_id in sampled)
        if result_id == mine.id and trust is not None:
            settled = verdict.status, verdict.reason, trust
    if settled is not None:
        return settled
    row = conn.execute(
        sa.select(r.status, r.reason, cl.trust)
        .join(contribution_clients, cl.id == r.client_id)
        .where(r.id == mine.id)
    ).one()
    return row.status, row.reason or WAITING, float(row.trust or 0.0)


def _judge(
    conn: sa.Connection,
    result_id: int,
    client_id: str | None,
    verdict: Verdict,
    sampled: bool = False,
) -> float | None:
    """Settle one pending result (once: a result judged meanwhile is left alone) and
    move its client's trust: up a little when accepted, down sharply when wrong; an
    accepted result the server's own embedding checked (in full, or ``sampled``)
    counts towards the client's probation. The client's trust after it, or None
    when the result was judged meanwhile (or its client is unknown)."""
    r, cl = contribution_results.c, contribution_clients.c
    done = conn.execute(
        contribution_results.update()
        .where(r.id == result_id, r.status == "pending")
        .values(status=verdict.status, reason=verdict.reason)
    ).rowcount
    if not done or client_id is None:
        return None
    if verdict.status == "cancelled":
        trust = conn.scalar(sa.select(cl.trust).where(cl.id == client_id))
    else:
        moved = (
            cl.trust + TRUST_GAIN * (1 - cl.trust)
            if verdict.status == "accepted"
            else cl.trust * TRUST_PENALTY
        )
        confirmed = verdict.status == "accepted" and (verdict.checked or sampled)
        trust = conn.execute(
            contribution_clients.update()
            .where(cl.id == client_id)
            .values(trust=moved, checked=cl.checked + (1 if confirmed else 0))
            .returning(cl.trust)
        ).scalar()
    return None if trust is None else float(trust)


def _accept(
    conn: sa.Connection,
    store: DocumentStore,
    task: sa.Row[Any],
    vectors: npt.NDArray[np.float32],
    now: int,
) -> bool:
    """Move the task ``open → accepted`` and write its vectors to the store, or
    cancel it when its documents changed; False when cancelled. A task no longer
    open (another request settled it) is left as it is. The caller holds the
    task's row lock, and the move is one conditional update: applied once."""
    t = contribution_tasks.c
    if task.state != "open":
        return True
    if not is_current(store, task):
        cancel(conn, task.id)
        return False
    moved = conn.execute(
        contribution_tasks.update()
        .where(t.id == task.id, t.state == "open")
        .values(state="accepted", accepted_ms=now)
    ).rowcount
    if not moved:
        return True
    # A document updated since is_current read it is skipped by the store, which
    # compares the texts inside its own write transaction: it never gets a vector
    # of its old text, and, its claim gone, it is tasked again with the new one.
    skipped = store.put_vectors(
        task.model,
        dict(zip(task.doc_ids, vectors, strict=True)),
        texts=dict(zip(task.doc_ids, task.input["texts"], strict=True)),
    )
    if skipped:
        log.info(
            "contributions: %d document(s) of task %s changed as its vectors were "
            "written; they are left to a new task",
            len(skipped),
            task.id,
        )
    conn.execute(contribution_task_docs.delete().where(contribution_task_docs.c.task_id == task.id))
    TASKS.labels("accepted").inc()
    return True

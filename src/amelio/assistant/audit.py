"""``amelio learnings audit``: what in a project's learnings needs a person.

Memory stores of self-improving assistants rot quietly (docs/learnings.md cites
audits that found most stored memories to be junk), so the audit looks for each
way a learning goes bad and names the learnings concerned:

* ``duplicate``: two active learnings of one skill that say the same thing
  (:mod:`amelio.assistant.likeness`); the merge on write should leave none, so one
  here means an edit, an import or a changed threshold let it in;
* ``conflict``: two active learnings that contradict each other, or a supersede
  proposal still waiting for a person;
* ``secret`` and ``injection``: in any learning, whatever its state (a rejected
  candidate still holds its text in the database);
* ``pii``: personal data the scrubbing patterns recognize;
* ``stale``: active, and in no prompt for ``learnings_stale_days``.

The CLI exits 1 when the audit finds anything, so it can gate a deploy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from amelio.assistant import learnings as L
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = ["KINDS", "Finding", "audit"]

Kind = Literal["duplicate", "conflict", "secret", "injection", "pii", "stale"]
KINDS: tuple[Kind, ...] = ("duplicate", "conflict", "secret", "injection", "pii", "stale")


@dataclass(frozen=True)
class Finding:
    kind: Kind
    learning_ids: tuple[int, ...]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "learningIds": list(self.learning_ids), "detail": self.detail}


def _pairs(items: list[L.Learning], vectors: dict[int, Any]) -> list[Finding]:
    """Duplicate and conflicting pairs among active learnings of one scope.

    With embeddings, one matrix product per learning picks the others close enough
    in meaning to be worth the word-level tests (``likeness.FAR``, as on write), so
    a project of thousands is not compared pair by pair in Python."""
    from amelio.assistant import likeness

    found: list[Finding] = []
    index = {item.id: n for n, item in enumerate(items)}
    embedded = [item for item in items if item.id in vectors]
    matrix = None
    if embedded:
        import numpy as np

        matrix = np.vstack([vectors[item.id] for item in embedded])
    for i, a in enumerate(items):
        if a.id in vectors and matrix is not None:
            scores = matrix @ vectors[a.id]
            close = {
                b.id: float(score)
                for b, score in zip(embedded, scores, strict=True)
                if index[b.id] > i and score >= likeness.FAR
            }
            others = [items[index[b]] for b in close]
            others += [b for b in items[i + 1 :] if b.id not in vectors]
        else:
            close, others = {}, items[i + 1 :]
        for b in others:
            if a.skill is not None and b.skill is not None and a.skill != b.skill:
                continue
            relation = likeness.relate(b.rule, a.rule, close.get(b.id))
            if relation == "same":
                found.append(Finding("duplicate", (a.id, b.id), f"{a.rule!r} ~ {b.rule!r}"))
            elif relation == "contradicts":
                found.append(Finding("conflict", (a.id, b.id), f"{a.rule!r} vs {b.rule!r}"))
    return found


def audit(
    ws: Workspace, *, project: str = DEFAULT_PROJECT, now: datetime | None = None
) -> list[Finding]:
    """Every finding, in :data:`KINDS` order, then by learning id."""
    import sqlalchemy as sa

    from amelio.assistant.review import used_since
    from amelio.assistant.vetting import vet
    from amelio.db.schema import learnings, utcnow

    now = now or utcnow()
    L.sync_file(ws, project)
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        rows = conn.execute(
            sa.select(learnings).where(learnings.c.project_id == pid).order_by(learnings.c.id)
        ).all()
        items = [L._row(r, project) for r in rows]
        active = [i for i in items if i.status == "active"]
        stale_after = timedelta(days=ws.settings.learnings_stale_days)
        recent = used_since(conn, pid, now - stale_after)
    embedded = [r for r in rows if r.embedding is not None and r.status == "active"]
    vectors: dict[int, Any] = {}
    if embedded:  # numpy comes with amelio[semantic], as embeddings do
        import numpy as np

        vectors = {r.id: np.frombuffer(r.embedding, dtype=np.float32) for r in embedded}
    dims = {v.shape[0] for v in vectors.values()}
    if len(dims) > 1:  # written under two embedding models: compare words only
        vectors = {}
    found = _pairs(active, vectors)
    found += [
        Finding(
            "conflict",
            (i.id, i.supersedes_id),
            f"supersede proposal waiting: {i.rule!r} would replace #{i.supersedes_id}",
        )
        for i in items
        if i.status == "candidate" and i.supersedes_id is not None
    ]
    for item in items:
        for flag in vet(item.rule):
            found.append(
                Finding(flag.kind, (item.id,), f"{flag.label} in a {item.status} learning")
            )
    for item in active:
        if item.id not in recent and now - item.created_at >= stale_after:
            found.append(
                Finding(
                    "stale",
                    (item.id,),
                    f"in no prompt for {stale_after.days} days "
                    f"(created {item.created_at:%Y-%m-%d})",
                )
            )
    order = {k: n for n, k in enumerate(KINDS)}
    return sorted(found, key=lambda f: (order[f.kind], f.learning_ids))

"""The search side of findings: searches that failed people, and what would mend them.

:func:`gather_search_evidence` reads a project's search impressions in the window
(every response is one, empty ones included) and the feedback events that point
at them, and returns four kinds of evidence, each a query text to group by
meaning:

* **no results** (``search:empty:ID``): the response was empty;
* **reformulation chains** (``search:chain:ID``, ID the chain's first
  impression): a session searched again within
  :data:`~amelio.search.aggregation.REFORMULATION_WINDOW_MS` with a similar query
  (the aggregator's own test), or the client sent ``query_reformulated``; the
  chain's text is its queries in order, and it remembers what was clicked at its
  end;
* **abandoned** (``search:abandoned:ID``): the client sent ``query_abandoned``, or
  a named session searched and clicked nothing at all (once per session, at its
  last search); a search without a session is abandoned only when the client
  says so, since one lone search without a click is no evidence of anything;
* **hidden** (``search:hidden:SEQ``): a person hid a result (``result_hidden``).

:func:`search_fix` turns a search finding's evidence into what would mend it:
synonyms learned from chains that ended in a click (the word people used, the
word that found it), documents to pin for the first query of such chains, results
people hid, and, when most of the evidence never found anything, a note that the
corpus lacks the answer with the most common unanswered queries.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from amelio.db.schema import feedback_events, search_impressions
from amelio.improve.evidence import Evidence
from amelio.search.aggregation import REFORMULATION_WINDOW_MS, reworded
from amelio.text import ENGLISH_STOPWORDS, tokens

__all__ = ["SEARCH_KINDS", "gather_search_evidence", "search_fix"]

#: The kinds of search evidence, as their refs start (``search:KIND:ID``).
SEARCH_KINDS = ("empty", "chain", "abandoned", "hidden")
#: Feedback that says a result served the person.
_ENGAGED = ("result_clicked", "result_pinned", "vote_up")
_CHUNK = 500
#: A synonym, a pin or a hidden result is proposed once this many chains or people agree.
MIN_AGREEING = 2


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _events(conn: sa.Connection, query_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The feedback events about ``query_ids`` that findings read, by query id."""
    found: dict[str, list[Any]] = defaultdict(list)
    for start in range(0, len(query_ids), _CHUNK):
        chunk = list(query_ids[start : start + _CHUNK])
        for row in conn.execute(
            sa.select(
                feedback_events.c.seq,
                feedback_events.c.event_type,
                feedback_events.c.event_time_ms,
                feedback_events.c.query_id,
                feedback_events.c.doc_id,
                feedback_events.c.payload,
            )
            .where(
                feedback_events.c.query_id.in_(chunk),
                feedback_events.c.event_type.in_(
                    (*_ENGAGED, "result_hidden", "query_reformulated", "query_abandoned")
                ),
            )
            .order_by(feedback_events.c.seq)
        ):
            found[row.query_id].append(row)
    return found


def gather_search_evidence(
    conn: sa.Connection, project: str, since: datetime
) -> tuple[list[Evidence], int]:
    """The window's search failure evidence of ``project``, oldest first, and how many searches
    the window holds (the share's denominator)."""
    shown = conn.execute(
        sa.select(
            search_impressions.c.id,
            search_impressions.c.query_id,
            search_impressions.c.query_norm,
            search_impressions.c.results,
            search_impressions.c.session_hash,
            search_impressions.c.created_ms,
        )
        .where(
            search_impressions.c.project == project,
            search_impressions.c.created_ms >= _ms(since),
        )
        .order_by(search_impressions.c.created_ms, search_impressions.c.id)
    ).all()
    events = _events(conn, [s.query_id for s in shown])

    def engaged(query_id: str) -> list[str]:
        return [e.doc_id for e in events.get(query_id, ()) if e.event_type in _ENGAGED and e.doc_id]

    def said(query_id: str, kind: str) -> bool:
        return any(e.event_type == kind for e in events.get(query_id, ()))

    found: list[Evidence] = []
    in_chain: set[int] = set()
    sessions: dict[str, list[Any]] = defaultdict(list)
    for s in shown:
        if s.session_hash is not None:
            sessions[s.session_hash].append(s)
        if not s.results:
            found.append(
                Evidence(
                    f"search:empty:{s.id}",
                    None,
                    s.query_norm,
                    _at(s.created_ms),
                    detail={"kind": "empty", "queries": [s.query_norm], "clicked": []},
                )
            )
        for e in events.get(s.query_id, ()):
            if e.event_type == "result_hidden" and e.doc_id:
                reason = (json.loads(e.payload).get("hide") or {}).get("reason")
                found.append(
                    Evidence(
                        f"search:hidden:{e.seq}",
                        None,
                        s.query_norm,
                        _at(e.event_time_ms),
                        detail={
                            "kind": "hidden",
                            "queries": [s.query_norm],
                            "doc": e.doc_id,
                            "reason": reason,
                        },
                    )
                )
    for searches in sessions.values():
        chain: list[Any] = []
        for s in [*searches, None]:
            follows = (
                s is not None
                and chain
                and s.created_ms - chain[-1].created_ms <= REFORMULATION_WINDOW_MS
                and (
                    reworded(chain[-1].query_norm, s.query_norm)
                    or said(chain[-1].query_id, "query_reformulated")
                )
            )
            if follows:
                chain.append(s)
                continue
            if len(chain) > 1:
                queries = [c.query_norm for c in chain]
                found.append(
                    Evidence(
                        f"search:chain:{chain[0].id}",
                        None,
                        " → ".join(queries),
                        _at(chain[-1].created_ms),
                        detail={
                            "kind": "chain",
                            "queries": queries,
                            "clicked": engaged(chain[-1].query_id),
                        },
                    )
                )
                in_chain |= {c.id for c in chain}
            chain = [] if s is None else [s]
        if searches and not any(engaged(s.query_id) for s in searches):
            last = searches[-1]
            if last.id not in in_chain and last.results:
                queries = list(dict.fromkeys(s.query_norm for s in searches))
                found.append(
                    Evidence(
                        f"search:abandoned:{last.id}",
                        None,
                        " · ".join(queries),
                        _at(last.created_ms),
                        detail={"kind": "abandoned", "queries": queries, "clicked": []},
                    )
                )
    refs = {e.ref for e in found}
    for s in shown:  # the client said so, with or without a session
        ref = f"search:abandoned:{s.id}"
        if ref not in refs and s.id not in in_chain and said(s.query_id, "query_abandoned"):
            found.append(
                Evidence(
                    ref,
                    None,
                    s.query_norm,
                    _at(s.created_ms),
                    detail={"kind": "abandoned", "queries": [s.query_norm], "clicked": []},
                )
            )
    found.sort(key=lambda e: (e.at, e.ref))
    return found, len(shown)


def _words(text: str) -> list[str]:
    return [t for t in tokens(text) if t not in ENGLISH_STOPWORDS]


def search_fix(evidence: Sequence[Evidence]) -> dict[str, Any]:
    """What would mend a search finding, from its evidence's details (see the module
    docstring): ``synonyms``, ``pins``, ``hidden``, and ``unanswered`` with a
    ``corpusLacks`` flag when most of it never found anything."""
    synonyms: Counter[tuple[str, str]] = Counter()
    pins: Counter[tuple[str, str]] = Counter()
    hidden: Counter[tuple[str, str]] = Counter()
    unanswered: Counter[str] = Counter()
    found_nothing = 0
    for e in evidence:
        detail = e.detail or {}
        kind, queries = detail.get("kind"), detail.get("queries") or []
        if kind == "hidden":
            hidden[(queries[0], detail["doc"])] += 1
            continue
        clicked = detail.get("clicked") or []
        if kind == "chain" and clicked:
            first, last = set(_words(queries[0])), set(_words(queries[-1]))
            gone, came = sorted(first - last), sorted(last - first)
            # One word swapped for one word is a synonym; more is a rewording.
            if len(gone) == 1 and len(came) == 1:
                synonyms[(gone[0], came[0])] += 1
            for doc in dict.fromkeys(clicked):
                pins[(queries[0], doc)] += 1
            continue
        found_nothing += 1
        unanswered.update(queries[:1] if kind != "chain" else queries[-1:])
    total = max(len(evidence), 1)
    return {
        "kind": "search",
        "synonyms": [
            {"from": a, "to": b, "chains": n}
            for (a, b), n in synonyms.most_common()
            if n >= MIN_AGREEING
        ],
        "pins": [
            {"query": q, "doc": d, "chains": n}
            for (q, d), n in pins.most_common(10)
            if n >= MIN_AGREEING
        ],
        "hidden": [
            {"query": q, "doc": d, "times": n}
            for (q, d), n in hidden.most_common(10)
            if n >= MIN_AGREEING
        ],
        "unanswered": [{"query": q, "times": n} for q, n in unanswered.most_common(5)],
        "corpusLacks": found_nothing / total >= 0.5,
    }

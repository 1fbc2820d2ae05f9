"""Judgment lists: graded (query, document) pairs that rankings are measured against.

A list is built from one of three sources, and kept with how it was built
(``meta``) and, per pair, what its grade rests on (``evidence``):

* **clicks** — graded from the click model. For each (query, document) with
  signals, the *examinations* are its impressions at each rank times that rank's
  fitted examination probability θ (:func:`~amelio.search.clickmodel.fit_pbm`),
  and never fewer than its clicks (whoever clicked had looked); the *satisfied
  clicks* are :func:`~amelio.search.clickmodel.utility`
  (a click with a long dwell counts 1, a bounce 0, a click without dwell ½). The
  posterior satisfaction rate, shrunk towards the average γ0 with
  ``search_prior_weight`` pseudo-examinations as the feedback score is,

      rate = (satisfied + prior · γ0) / (examinations + prior)

  is divided by γ0: a document satisfying as often as the average one has a ratio
  of 1. The grade is how many of :data:`CLICK_THRESHOLDS` (1, 2, 4) the ratio
  reaches: 0 below the average, 1 from it, 2 from twice it, 3 from four times it.
  A pair needs :data:`MIN_EXAMINATIONS` examinations to be graded at all (fewer
  are left out and counted); a pair hidden at least as often as it satisfied is
  graded 0 whatever its clicks.
* **llm** — the configured LLM grades each pair of a *pool* (each query's top
  ``depth`` documents in a ranking, ``bm25`` by default) with :data:`RUBRIC` at
  temperature 0. The reply is read as ``{"grade": n}``, ``Grade: n`` or a lone
  digit; any other reply leaves the pair ungraded, with the reply kept as evidence.
* **human** — the pool's pairs ungraded, for people to grade on the dashboard
  (``/judgments/NAME``) or with ``POST /v1/judgments/NAME/grades``.

:func:`import_qrels` reads a BEIR qrels file as a human list. :func:`compare`
measures how two lists agree on the pairs both graded. Queries are stored as the
search's query key (:func:`~amelio.search.service.query_key`: normalized and
scrubbed of personal data), the form signals are kept under, so lists from
different sources meet on the same pairs.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio.db.schema import search_impressions, search_signals
from amelio.errors import InvalidInput, LLMError
from amelio.search.clickmodel import Propensities, load_propensities, utility
from amelio.search.counts import SignalRow, signals_for
from amelio.search.judgment_lists import (
    GRADES,
    SOURCES,
    JudgmentList,
    Pair,
    check_name,
    graded_pairs,
    refuse_taken,
    store_list,
)
from amelio.search.profiles import ProfileSpec, parse_profile
from amelio.stats import confusion, spearman, weighted_kappa
from amelio.text import json_lines

if TYPE_CHECKING:
    from amelio.llm import Provider
    from amelio.search.documents import Document
    from amelio.search.service import Searcher
    from amelio.workspace.folder import Workspace

__all__ = [
    "CLICK_THRESHOLDS",
    "MIN_EXAMINATIONS",
    "RUBRIC",
    "Agreement",
    "BuildReport",
    "build",
    "click_grade",
    "compare",
    "import_qrels",
    "parse_grade",
    "read_queries",
]

#: The ratio to the average satisfaction rate (γ0) a pair needs for grades 1, 2, 3.
CLICK_THRESHOLDS = (1.0, 2.0, 4.0)
#: Position-debiased examinations a pair needs before its clicks grade it: below,
#: the prior still decides most of the rate, and the grade would be the prior's.
MIN_EXAMINATIONS = 5.0
DEFAULT_DEPTH = 10
MAX_DEPTH = 100
#: How many of the most searched queries an llm or human list takes by default.
DEFAULT_MAX_QUERIES = 50
#: The longest stored query (the ``judgments.query`` column).
MAX_QUERY_CHARS = 1000
#: How much of a document's body the LLM (and the dashboard) sees.
EXCERPT_CHARS = 2000
#: Consecutive LLM failures, before any answer, after which a build stops: the
#: model is not reachable, and every other pair would fail the same way.
_GIVE_UP_AFTER = 3

RUBRIC = """You grade how well a document answers a search query, for a search \
engine's evaluation. Use this scale:

3 = perfect: the document is what the searcher was looking for; it answers the \
query fully and directly.
2 = relevant: it answers the query in large part, or answers it among other things.
1 = related: it is on the query's topic but does not answer it; a searcher might \
glance at it.
0 = irrelevant: it has nothing useful for this query.

Judge the document's content, not its length or style. Grade the query as written; \
when it is ambiguous, grade for its most likely meaning.
Reply with JSON only: {"grade": <0-3>}"""
#: Bumped whenever :data:`RUBRIC` changes meaning: lists record which one graded them.
RUBRIC_VERSION = 1


# -- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildReport:
    """What a build or an import made: the list, and the pairs it could not grade.

    ``unparsed``: LLM replies with no grade in them; ``failed``: LLM calls that
    errored; ``too_little``: click pairs left out for lack of examinations."""

    list: JudgmentList
    unparsed: int = 0
    failed: int = 0
    too_little: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "list": self.list.to_dict(),
            "unparsed": self.unparsed,
            "failed": self.failed,
            "tooLittleEvidence": self.too_little,
        }


@dataclass(frozen=True)
class Agreement:
    """Two lists on the pairs both graded: quadratic-weighted κ, Spearman's ρ, the
    share graded identically and ``confusion[a][b]`` (pairs graded a in the first
    list, b in the second). κ or ρ is None where it is undefined (one grade
    throughout)."""

    a: str
    b: str
    pairs: int
    exact: int
    kappa: float | None
    rho: float | None
    confusion: list[list[int]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "pairs": self.pairs,
            "exact": self.exact,
            "kappa": None if self.kappa is None else round(self.kappa, 4),
            "rho": None if self.rho is None else round(self.rho, 4),
            "confusion": self.confusion,
        }


# -- queries and pools ---------------------------------------------------------------------


def read_queries(path: Path) -> list[str]:
    """The queries of ``path``: one per line, or JSON lines with ``"query"`` or
    ``"text"`` (BEIR's queries.jsonl); blank lines are skipped."""
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            text: object = line.strip()
            if line.lstrip().startswith("{"):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(
                        f"{path.name} line {number}: not valid JSON ({exc.msg}).", field="queries"
                    ) from exc
                text = record.get("query", record.get("text")) if isinstance(record, dict) else None
                if not isinstance(text, str):
                    raise InvalidInput(
                        f'{path.name} line {number}: a JSON line names its query as "query" '
                        'or "text".',
                        field="queries",
                    )
            if isinstance(text, str) and text.strip():
                texts.append(text.strip())
    if not texts:
        raise InvalidInput(f"{path.name} holds no queries.", field="queries")
    return texts


def _keys(ws: Workspace, texts: Iterable[str]) -> dict[str, str]:
    """Each query's key (as impressions and signals store it) → the text as given."""
    from amelio.search.service import query_key

    out: dict[str, str] = {}
    for text in texts:
        key = query_key(ws.settings, text)
        if not key:
            continue  # nothing searchable in it (punctuation only)
        if len(key) > MAX_QUERY_CHARS:
            raise InvalidInput(
                f"A query is at most {MAX_QUERY_CHARS} characters: {text[:60]!r}….",
                field="queries",
            )
        out.setdefault(key, text)
    return out


def _most_searched(ws: Workspace, limit: int) -> list[str]:
    c = search_impressions.c
    count = sa.func.count().label("n")
    with ws.engine.connect() as conn:
        rows = conn.execute(
            sa.select(c.query_norm, count)
            .group_by(c.query_norm)
            .order_by(count.desc(), c.query_norm)
            .limit(limit)
        ).all()
    return [r.query_norm for r in rows if r.query_norm and len(r.query_norm) <= MAX_QUERY_CHARS]


def _searcher(ws: Workspace, searcher: Searcher | None) -> Searcher:
    from amelio.search.service import Searcher

    return searcher or Searcher(ws, background_aggregation=False)


def _documents(searcher: Searcher, doc_ids: Sequence[str]) -> dict[str, Document]:
    found: dict[str, Document] = {}
    for start in range(0, len(doc_ids), 500):
        found |= searcher.engine.documents(list(doc_ids[start : start + 500]))
    return found


# -- clicks --------------------------------------------------------------------------------


def click_grade(
    row: SignalRow,
    propensities: Propensities,
    prior: float,
    *,
    thresholds: Sequence[float] = CLICK_THRESHOLDS,
    min_examinations: float = MIN_EXAMINATIONS,
) -> tuple[int | None, dict[str, Any]]:
    """The grade the clicks give one pair (None: too few examinations) and the
    counts behind it (see the module's docstring for the rule)."""
    gamma0 = propensities.gamma0
    shown = sum(n * propensities.at(int(k)) for k, n in row.impressions_by_rank.items())
    examined = max(shown, float(row.clicks))  # whoever clicked had looked
    satisfied = utility(row.clicks, row.dwell_clicks, row.bounces)
    rate = (satisfied + prior * gamma0) / (examined + prior)
    ratio = rate / gamma0
    evidence: dict[str, Any] = {
        "impressions": row.impressions,
        "examinations": round(examined, 3),
        "clicks": row.clicks,
        "satisfiedClicks": round(satisfied, 3),
        "dwellClicks": row.dwell_clicks,
        "bounces": row.bounces,
        "actors": row.actors,
        "hides": row.hides,
        "rate": round(rate, 4),
        "ratio": round(ratio, 4),
    }
    if examined < min_examinations:
        return None, evidence
    if row.hides and row.hides >= satisfied:
        return 0, evidence | {"hidden": True}
    return sum(ratio >= t for t in thresholds), evidence


def _click_pairs(
    ws: Workspace,
    keys: list[str] | None,
    max_queries: int | None,
    thresholds: Sequence[float],
    min_examinations: float,
) -> tuple[list[Pair], int, dict[str, Any]]:
    c = search_signals.c
    with ws.engine.connect() as conn:
        propensities = load_propensities(conn)
        if keys is None:
            shown = sa.func.sum(c.impressions).label("shown")
            query = sa.select(c.query_norm, shown).group_by(c.query_norm)
            query = query.order_by(shown.desc(), c.query_norm)
            if max_queries is not None:
                query = query.limit(max_queries)
            keys = [r.query_norm for r in conn.execute(query)]
        if not keys:
            raise InvalidInput(
                "No search signals yet: a clicks list needs searches with clicks, "
                "aggregated (`amelio signals update`).",
                field="source",
            )
        pairs: list[Pair] = []
        too_little = 0
        for key in keys:
            for doc_id, row in sorted(signals_for(conn, key).items()):
                value, evidence = click_grade(
                    row,
                    propensities,
                    ws.settings.search_prior_weight,
                    thresholds=thresholds,
                    min_examinations=min_examinations,
                )
                if value is None:
                    too_little += 1
                else:
                    pairs.append(Pair(key, doc_id, value, evidence))
    meta = {
        "queries": len(keys),
        "thresholds": list(thresholds),
        "minExaminations": min_examinations,
        "priorWeight": ws.settings.search_prior_weight,
        "gamma0": propensities.gamma0,
        "theta": list(propensities.theta),
        "signalsVersion": propensities.version,
    }
    return pairs, too_little, meta


# -- the LLM -------------------------------------------------------------------------------

_JSON_GRADE = re.compile(r"""["']?grade["']?\s*:\s*["']?([0-9]+)""", re.IGNORECASE)
_LABELLED = re.compile(r"\bgrade\b\s*(?:[:=]|is)\s*\**\s*([0-9]+)\b", re.IGNORECASE)
_LONE = re.compile(r"[\s\"'`*.]*([0-9])[\s\"'`*.]*")


def parse_grade(text: str) -> int | None:
    """The grade in an LLM's reply: ``{"grade": 2}`` (amid prose or fences too),
    ``Grade: 2``, or a reply that is a lone digit; None for anything else, or for a
    number outside 0–3."""
    for pattern in (_JSON_GRADE, _LABELLED):
        match = pattern.search(text)
        if match:
            value = int(match.group(1))
            return value if value in GRADES else None
    lone = _LONE.fullmatch(text)
    if lone:
        value = int(lone.group(1))
        return value if value in GRADES else None
    return None


def _ask(provider: Provider, query: str, doc: Document | None) -> tuple[int | None, str]:
    """The LLM's grade of one pair and its reply (LLMError when the call failed)."""
    from amelio.llm import LLMRequest

    title = doc.title if doc else ""
    body = doc.body[:EXCERPT_CHARS] if doc else ""
    user = f"QUERY: {query}\n\nDOCUMENT TITLE: {title}\n\nDOCUMENT:\n{body}"
    completion = provider.complete(LLMRequest.single(RUBRIC, user, max_tokens=200, temperature=0))
    return parse_grade(completion.text), completion.text


def _llm_pairs(
    ws: Workspace, provider: Provider, pool: list[tuple[str, str, list[str]]], searcher: Searcher
) -> tuple[list[Pair], int, int]:
    """Each pooled pair graded by ``provider``; (pairs, unparsed, failed)."""
    pairs: list[Pair] = []
    unparsed = failed = answered = 0
    for key, text, ranked in pool:
        docs = _documents(searcher, ranked)
        for rank, doc_id in enumerate(ranked, start=1):
            try:
                value, reply = _ask(provider, text, docs.get(doc_id))
            except LLMError as exc:
                failed += 1
                if not answered and failed >= _GIVE_UP_AFTER:
                    raise
                pairs.append(Pair(key, doc_id, None, {"rank": rank, "error": exc.message}))
                continue
            answered += 1
            if value is None:
                unparsed += 1
            pairs.append(Pair(key, doc_id, value, {"rank": rank, "reply": reply[:2000]}))
    return pairs, unparsed, failed


# -- building ------------------------------------------------------------------------------


def _pool(
    ws: Workspace, searcher: Searcher, keys: dict[str, str], spec: ProfileSpec, depth: int
) -> list[tuple[str, str, list[str]]]:
    """(query key, query text, its top ``depth`` documents) for each query."""
    return [
        (
            key,
            text,
            [
                d.doc_id
                for d in searcher.rank(
                    text, profile=spec.profile, alpha=spec.alpha, beta=spec.beta, limit=depth
                )
            ],
        )
        for key, text in keys.items()
    ]


def build(
    ws: Workspace,
    name: str,
    source: str,
    *,
    queries: Sequence[str] | None = None,
    depth: int = DEFAULT_DEPTH,
    profile: str | ProfileSpec = "bm25",
    max_queries: int | None = None,
    thresholds: Sequence[float] = CLICK_THRESHOLDS,
    min_examinations: float = MIN_EXAMINATIONS,
    created_by: str = "cli",
    provider: Provider | None = None,
    searcher: Searcher | None = None,
) -> BuildReport:
    """Build list ``name`` from ``source`` (clicks, llm or human; see the module).

    ``queries``: the queries to judge (default: for clicks, every query with
    signals, the most shown first; otherwise the most searched), at most
    ``max_queries`` of them (default: all, or :data:`DEFAULT_MAX_QUERIES` of the
    most searched). ``depth`` and ``profile`` make the
    pool of an llm or human list. ``provider`` replaces the configured LLM;
    ``searcher`` the workspace's engine (a benchmark's scratch corpus)."""
    check_name(name)
    if source not in SOURCES:
        raise InvalidInput(
            f"Unknown judgment source {source!r}; use one of: {', '.join(SOURCES)}.",
            field="source",
        )
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput(f"depth is between 1 and {MAX_DEPTH}, not {depth}.", field="depth")
    if max_queries is not None and max_queries < 1:
        raise InvalidInput(f"max queries is at least 1, not {max_queries}.", field="maxQueries")
    if sorted(thresholds) != list(thresholds) or len(thresholds) != len(GRADES) - 1:
        raise InvalidInput("The click thresholds are three increasing ratios.", field="thresholds")
    spec = parse_profile(profile) if isinstance(profile, str) else profile
    refuse_taken(ws, name)
    keys = None if queries is None else _keys(ws, queries)
    if keys is not None and not keys:
        raise InvalidInput("None of the queries has a word to search for.", field="queries")
    if keys is not None and max_queries is not None:
        keys = dict(list(keys.items())[:max_queries])
    if source == "clicks":
        pairs, too_little, about = _click_pairs(
            ws, None if keys is None else list(keys), max_queries, thresholds, min_examinations
        )
        listed = store_list(ws, name, source, created_by, about, pairs)
        return BuildReport(listed, too_little=too_little)
    if keys is None:
        keys = {k: k for k in _most_searched(ws, max_queries or DEFAULT_MAX_QUERIES)}
        if not keys:
            raise InvalidInput(
                "No searches logged yet: give the queries to judge (--queries FILE).",
                field="queries",
            )
    base: Provider | None = None
    if source == "llm":  # before any ranking: a missing LLM is said at once
        from amelio.llm import get_provider

        base = provider or get_provider(ws.settings, purpose="Grading judgments")
    engine = _searcher(ws, searcher)
    pool = _pool(ws, engine, keys, spec, depth)
    meta: dict[str, Any] = {"queries": len(pool), "depth": depth, "profile": spec.label()}
    if base is None:
        pairs = [
            Pair(key, doc_id, None, {"rank": rank})
            for key, _text, ranked in pool
            for rank, doc_id in enumerate(ranked, start=1)
        ]
        return BuildReport(store_list(ws, name, source, created_by, meta, pairs))
    from amelio.llm.cache import CachedProvider

    cached = CachedProvider(base, ws.engine)  # a rebuild of the same pool costs nothing
    pairs, unparsed, failed = _llm_pairs(ws, cached, pool, engine)
    meta |= {
        "provider": base.name,
        "model": base.model,
        "temperature": 0,
        "rubricVersion": RUBRIC_VERSION,
        "rubric": RUBRIC,
        "unparsed": unparsed,
        "failed": failed,
    }
    listed = store_list(ws, name, source, created_by, meta, pairs)
    return BuildReport(listed, unparsed=unparsed, failed=failed)


def import_qrels(
    ws: Workspace,
    name: str,
    qrels: Path,
    queries: Path,
    *,
    created_by: str = "cli",
    searcher: Searcher | None = None,
) -> BuildReport:
    """A BEIR qrels file (``query-id``, ``corpus-id``, ``score`` TSV, header optional)
    and its ``queries.jsonl`` (``_id``, ``text``) as human list ``name``.

    Grades are clipped to 0–3: a 4 (Cranfield's "complete answer") becomes 3, so
    the top two grades of a 0–4 scale merge, and a negative one ("no interest")
    becomes 0. Every document must be in the search corpus, or the import is
    refused with an error naming those that are not: a pair nobody can retrieve
    would count against every ranking."""
    check_name(name)
    refuse_taken(ws, name)
    texts: dict[str, str] = {}
    with queries.open(encoding="utf-8") as f:
        for _number, where, record in json_lines(f, queries.name):
            if not isinstance(record, dict) or "_id" not in record or "text" not in record:
                raise InvalidInput(
                    f"{where}: a query is a JSON object with _id and text.", field="queries"
                )
            texts[str(record["_id"])] = str(record["text"])
    rows: list[tuple[str, str, int]] = []
    with qrels.open(encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.reader(f, delimiter="\t"), start=1):
            if not row or not "".join(row).strip():
                continue
            written = row[2].strip() if len(row) >= 3 else ""
            if not written.lstrip("-").isdigit():
                if number == 1:
                    continue  # the header
                raise InvalidInput(
                    f"{qrels.name} line {number}: a qrels line is query-id, corpus-id, "
                    "score (an integer), separated by tabs.",
                    field="qrels",
                )
            rows.append((row[0].strip(), row[1].strip(), int(written)))
    if not rows:
        raise InvalidInput(f"{qrels.name} holds no judgments.", field="qrels")
    missing = sorted({qid for qid, _, _ in rows if qid not in texts})
    if missing:
        raise InvalidInput(
            f"{len(missing)} query id(s) of {qrels.name} are not in {queries.name}: "
            f"{_some(missing)}.",
            field="queries",
        )
    doc_ids = sorted({doc_id for _, doc_id, _ in rows})
    known = _documents(_searcher(ws, searcher), doc_ids)
    unknown = [d for d in doc_ids if d not in known]
    if unknown:
        raise InvalidInput(
            f"{len(unknown)} document(s) of {qrels.name} are not in the search corpus: "
            f"{_some(unknown)}. Import the corpus first (amelio corpus import).",
            field="qrels",
            documents=unknown[:20],
        )
    key_of = {qid: key for qid, text in texts.items() for key in _keys(ws, [text])}
    best: dict[tuple[str, str], Pair] = {}
    for qid, doc_id, score in rows:
        key = key_of.get(qid)
        if key is None:
            continue  # a query with nothing searchable in it
        pair = Pair(key, doc_id, min(max(score, 0), 3), {"qrels": score, "queryId": qid})
        held = best.get((key, doc_id))
        if held is None or (pair.grade or 0) > (held.grade or 0):  # two ids, one query
            best[(key, doc_id)] = pair
    meta = {
        "imported": qrels.name,
        "queriesFile": queries.name,
        "queries": len({k for k, _ in best}),
        "grades": "clipped to 0-3: above 3 becomes 3, below 0 becomes 0",
    }
    return BuildReport(store_list(ws, name, "human", created_by, meta, list(best.values())))


def _some(items: Sequence[str], shown: int = 10) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


# -- agreement -----------------------------------------------------------------------------


def compare(ws: Workspace, a: str, b: str) -> Agreement:
    """How lists ``a`` and ``b`` agree on the pairs both graded (see :class:`Agreement`)."""
    first, second = graded_pairs(ws, a), graded_pairs(ws, b)
    pairs = [
        (grade_a, second[query][doc_id])
        for query, docs in sorted(first.items())
        for doc_id, grade_a in sorted(docs.items())
        if doc_id in second.get(query, {})
    ]
    if len(pairs) < 2:
        raise InvalidInput(
            f"{a!r} and {b!r} share {len(pairs)} graded pair(s): agreement needs at "
            "least 2. Build both over the same queries (--queries FILE).",
            field="judgments",
        )
    counted = Counter(x == y for x, y in pairs)
    return Agreement(
        a,
        b,
        len(pairs),
        counted[True],
        weighted_kappa(pairs),
        spearman([(float(x), float(y)) for x, y in pairs]),
        confusion(pairs),
    )

"""Interleaving: two rankings merged into one list, and clicks credited to either.

An A/B test shows each person one ranker and compares how the two groups
behave; the groups differ in who they are as much as in what they were shown,
so it needs many sessions. Interleaving shows each person *both* rankers in one
list and lets them choose: every session is a paired comparison, which is why
it detects a difference with one to two orders of magnitude fewer sessions
(Chapelle et al., "Large-scale validation and analysis of interleaved search
evaluation", 2012; ``amelio simulate --interleave`` measures it on a data set).

Two methods:

* **team-draft** (Radlinski et al., 2008) — as captains pick teams: a coin
  decides who picks first, then the ranker with fewer picks (the coin again on a
  tie) adds its best result not yet in the list. A click counts for the team
  that picked the result, unless both rankers had it at that same rank: the coin
  alone gave it to a team, so its click is noise (left out, the sessions needed
  on the synthetic set fell from 1,050 to 225). At every rank each ranker has the
  same chance to have placed the result (tested with a chi-square test), so
  position bias favours neither.
* **balanced** (Joachims, 2002) — the two rankings are walked in step, the
  coin deciding which goes first, so the top *n* of the list always holds the
  top ⌈n/2⌉ of one and ⌊n/2⌋ of the other. Credit: let *k* be the lower of the
  two rankers' ranks of the lowest clicked result; each ranker gets the clicks on
  results in its own top *k*.

A click is worth its :func:`~amelio.search.clickmodel.utility` (the click model
the feedback score uses): 1 with a dwell of 8 s or more, 0 for a bounce, ½ when
the client sent no dwell. A response is *competitive* when the two rankers'
lists differ; identical lists say nothing about which is better, so their clicks
are not credited.

The statistics are kept here too: a session's outcome is +1 (A's credit was
higher), −1 (B's) or 0; the preference margin is the mean outcome over sessions
with a credited click, with a normal interval (outcomes are bounded, and a
verdict waits for :data:`MIN_SESSIONS` of them, where the normal approximation
holds).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

__all__ = [
    "METHODS",
    "MIN_SESSIONS",
    "Interleaving",
    "Preference",
    "credit",
    "interleave",
    "preference",
]

Method = Literal["team-draft", "balanced"]
METHODS: tuple[str, ...] = ("team-draft", "balanced")
#: Sessions with a credited click a verdict waits for.
MIN_SESSIONS = 30


@dataclass(frozen=True)
class Interleaving:
    """What was shown and who put it there: ``teams[i]`` is ``"a"`` or ``"b"``, the
    ranker that contributed the result at rank i + 1 (balanced: the one whose walk
    placed it); ``a[i]`` and ``b[i]`` are that result's rank in each ranker's own
    list (None: not in it)."""

    method: str
    docs: tuple[str, ...]
    teams: str
    a: tuple[int | None, ...]
    b: tuple[int | None, ...]

    @property
    def competitive(self) -> bool:
        """Whether the two rankers' lists differed where they were shown: when each
        shown result sits at its own rank in both, they agreed."""
        return any(
            ra != i or rb != i for i, (ra, rb) in enumerate(zip(self.a, self.b, strict=True), 1)
        )

    def to_dict(self) -> dict[str, Any]:
        """The impression's ``interleaving`` column (and the UBI export's)."""
        return {"method": self.method, "teams": self.teams, "a": list(self.a), "b": list(self.b)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], docs: Sequence[str]) -> Interleaving:
        """Read a stored record back; :class:`ValueError` names what does not fit."""
        method, teams = raw.get("method"), raw.get("teams")
        a, b = raw.get("a"), raw.get("b")
        if method not in METHODS:
            raise ValueError(f"method is one of {', '.join(METHODS)}, not {method!r}")
        if not isinstance(teams, str) or set(teams) - {"a", "b"}:
            raise ValueError("teams is a string of 'a' and 'b', one per shown result")
        for side, ranks in (("a", a), ("b", b)):
            if not isinstance(ranks, list) or not all(
                r is None or (isinstance(r, int) and r >= 1) for r in ranks
            ):
                raise ValueError(f"{side} is a list of ranks (1 or more) or nulls")
        assert isinstance(a, list)
        assert isinstance(b, list)
        if not len(teams) == len(a) == len(b) == len(docs):
            raise ValueError(
                f"teams, a and b have one entry per shown result ({len(docs)}): "
                f"{len(teams)}, {len(a)}, {len(b)}"
            )
        return cls(str(method), tuple(docs), teams, tuple(a), tuple(b))


def interleave(
    a: Sequence[str], b: Sequence[str], limit: int, rng: random.Random, method: str = "team-draft"
) -> Interleaving:
    """The first ``limit`` results of A and B interleaved by ``method``."""
    if method == "team-draft":
        docs, teams = _team_draft(a, b, limit, rng)
    elif method == "balanced":
        docs, teams = _balanced(a, b, limit, rng)
    else:
        raise ValueError(f"method is one of {', '.join(METHODS)}, not {method!r}")
    rank_a = {d: i for i, d in enumerate(a, start=1)}
    rank_b = {d: i for i, d in enumerate(b, start=1)}
    return Interleaving(
        method,
        tuple(docs),
        "".join(teams),
        tuple(rank_a.get(d) for d in docs),
        tuple(rank_b.get(d) for d in docs),
    )


def _team_draft(
    a: Sequence[str], b: Sequence[str], limit: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    docs: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    picks = {"a": 0, "b": 0}
    pointers = {"a": 0, "b": 0}
    lists = {"a": a, "b": b}

    def next_of(team: str) -> str | None:
        ranking, i = lists[team], pointers[team]
        while i < len(ranking) and ranking[i] in seen:
            i += 1
        pointers[team] = i
        return ranking[i] if i < len(ranking) else None

    while len(docs) < limit:
        if picks["a"] != picks["b"]:
            order = ["a", "b"] if picks["a"] < picks["b"] else ["b", "a"]
        else:
            order = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
        for team in order:  # the other team picks when this one has run out
            doc = next_of(team)
            if doc is not None:
                break
        else:
            break
        docs.append(doc)
        teams.append(team)
        seen.add(doc)
        picks[team] += 1
    return docs, teams


def _balanced(
    a: Sequence[str], b: Sequence[str], limit: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    docs: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    a_first = rng.random() < 0.5
    ka = kb = 0
    while len(docs) < limit and (ka < len(a) or kb < len(b)):
        take_a = kb >= len(b) or (ka < len(a) and (ka < kb or (ka == kb and a_first)))
        if take_a:
            doc, team, ka = a[ka], "a", ka + 1
        else:
            doc, team, kb = b[kb], "b", kb + 1
        if doc not in seen:
            docs.append(doc)
            teams.append(team)
            seen.add(doc)
    return docs, teams


def credit(shown: Interleaving, clicks: Mapping[int, float]) -> tuple[float, float]:
    """A's and B's credit for ``clicks`` (1-based rank shown → the click's utility);
    (0, 0) for a response that was not competitive."""
    if not clicks or not shown.competitive:
        return 0.0, 0.0
    if shown.method == "team-draft":
        got = {"a": 0.0, "b": 0.0}
        for rank, value in clicks.items():
            # A result both rankers put at the same rank went to whichever team the
            # coin let pick it: its click says nothing of either, only adds noise.
            if 1 <= rank <= len(shown.teams) and shown.a[rank - 1] != shown.b[rank - 1]:
                got[shown.teams[rank - 1]] += value
        return got["a"], got["b"]
    # balanced: compare each ranker's own top k, k set by the lowest click
    size = len(shown.docs) + 1  # a result missing from a ranker's list ranks below all
    ranked = [r for r in clicks if 1 <= r <= len(shown.docs)]
    if not ranked:
        return 0.0, 0.0
    lowest = max(ranked)
    k = min(shown.a[lowest - 1] or size, shown.b[lowest - 1] or size)
    in_a = sum(clicks[r] for r in ranked if (shown.a[r - 1] or size) <= k)
    in_b = sum(clicks[r] for r in ranked if (shown.b[r - 1] or size) <= k)
    return float(in_a), float(in_b)


@dataclass(frozen=True)
class Preference:
    """Which ranker people preferred: outcomes over sessions with a credited click
    (``wins_a`` + ``wins_b`` + ``ties``), the margin (mean outcome, −1 to 1) with
    its 95 % interval, and a verdict once the interval excludes 0."""

    wins_a: int
    wins_b: int
    ties: int
    margin: float
    interval: tuple[float, float]
    verdict: str

    @property
    def sessions(self) -> int:
        return self.wins_a + self.wins_b + self.ties

    def to_dict(self) -> dict[str, Any]:
        return {
            "winsA": self.wins_a,
            "winsB": self.wins_b,
            "ties": self.ties,
            "sessions": self.sessions,
            "margin": round(self.margin, 4),
            "interval": [round(self.interval[0], 4), round(self.interval[1], 4)],
            "verdict": self.verdict,
        }


def preference(outcomes: Sequence[int], confidence: float = 0.95) -> Preference:
    """The margin of ``outcomes`` (+1 A, −1 B, 0 tie) and its verdict: ``A`` or
    ``B`` when the interval excludes 0 and at least :data:`MIN_SESSIONS` sessions
    had a credited click, else ``undecided``."""
    wins_a = sum(1 for o in outcomes if o > 0)
    wins_b = sum(1 for o in outcomes if o < 0)
    n = len(outcomes)
    if n == 0:
        return Preference(0, 0, 0, 0.0, (0.0, 0.0), "undecided")
    margin = (wins_a - wins_b) / n
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    spread = z * math.sqrt(max((wins_a + wins_b) / n - margin**2, 0.0) / n)
    low, high = max(margin - spread, -1.0), min(margin + spread, 1.0)
    verdict = "undecided"
    if n >= MIN_SESSIONS and low > 0:
        verdict = "A"
    elif n >= MIN_SESSIONS and high < 0:
        verdict = "B"
    return Preference(wins_a, wins_b, n - wins_a - wins_b, margin, (low, high), verdict)

"""A rank profile with its settings, as one value two rankers can be compared by.

Interleaving experiments (:mod:`amelio.search.experiments`), ``amelio simulate
--interleave`` and ``amelio relevance eval`` compare *rankers*, and a ranker is
more than a rank profile's name: two settings of ``hybrid_with_feedback`` (another
``beta``, no exploration) rank differently and are worth comparing. So a
:class:`ProfileSpec` is the profile plus the settings that change its ranking,
written ``NAME[:key=value,...]`` on the command line::

    bm25
    hybrid:alpha=0.3
    hybrid_with_feedback:beta=1.5,exploration=0

``alpha`` is the semantic weight, ``beta`` the feedback weight and
``exploration`` the share of responses that explore by Thompson sampling
(``search_thompson``); a key left out takes the workspace's setting when the
ranking is made. A profile's own rules apply as in any search: ``bm25`` has no
semantic side and no feedback, ``hybrid`` no feedback, ``semantic`` is all
semantic, so ``bm25:beta=2`` is the same ranker as ``bm25``
(:meth:`ProfileSpec.resolved`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from amelio.errors import InvalidInput

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = ["KEYS", "ProfileSpec", "parse_profile"]

#: The settings a spec may carry, and the range each is checked against.
KEYS: dict[str, tuple[float, float]] = {
    "alpha": (0.0, 1.0),
    "beta": (0.0, 10.0),
    "exploration": (0.0, 1.0),
}
#: The rank profiles (kept in step with ``amelio.search.service.PROFILES``, which
#: imports this module's parser, so the two cannot be declared apart).
PROFILE_NAMES = ("bm25", "semantic", "hybrid", "hybrid_with_feedback")


@dataclass(frozen=True)
class ProfileSpec:
    """One ranker: a rank profile and the settings that change what it ranks."""

    profile: str
    alpha: float | None = None
    beta: float | None = None
    exploration: float | None = None

    def label(self) -> str:
        """The spec as written on the command line (keys in a fixed order)."""
        parts = [f"{key}={value:g}" for key in KEYS if (value := getattr(self, key)) is not None]
        return self.profile + (":" + ",".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "alpha": self.alpha,
            "beta": self.beta,
            "exploration": self.exploration,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProfileSpec:
        return cls(
            str(raw["profile"]),
            *(None if raw.get(k) is None else float(raw[k]) for k in KEYS),
        )

    def resolved(self, settings: Settings) -> ProfileSpec:
        """Every setting filled in from ``settings`` and the profile's own rules
        applied, so two specs that rank alike compare equal."""
        alpha = settings.search_alpha if self.alpha is None else self.alpha
        beta = settings.search_beta if self.beta is None else self.beta
        exploration = settings.search_thompson if self.exploration is None else self.exploration
        if self.profile == "bm25":
            alpha, beta = 0.0, 0.0
        elif self.profile == "semantic":
            alpha, beta = 1.0, 0.0
        elif self.profile == "hybrid":
            beta = 0.0
        if beta == 0.0:
            exploration = 0.0  # Thompson sampling draws feedback scores: none to draw
        return replace(self, alpha=alpha, beta=beta, exploration=exploration)


def parse_profile(text: str, *, field: str = "profile") -> ProfileSpec:
    """``NAME[:key=value,...]`` as a :class:`ProfileSpec`, or :class:`InvalidInput`
    naming the part that is wrong."""
    name, colon, rest = text.strip().partition(":")
    if name not in PROFILE_NAMES:
        raise InvalidInput(
            f"Unknown rank profile {name!r} in {text!r}; use one of: "
            f"{', '.join(PROFILE_NAMES)} (with settings: hybrid:alpha=0.3).",
            field=field,
        )
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if rest else ():
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or key not in KEYS:
            raise InvalidInput(
                f"{part!r} in {text!r} is not a setting: write key=value with a key "
                f"among {', '.join(KEYS)}.",
                field=field,
            )
        if key in values:
            raise InvalidInput(f"{key} is given twice in {text!r}.", field=field)
        try:
            value = float(raw)
        except ValueError:
            raise InvalidInput(
                f"{key} in {text!r} is not a number: {raw!r}.", field=field
            ) from None
        low, high = KEYS[key]
        if math.isnan(value) or not low <= value <= high:
            raise InvalidInput(
                f"{key} in {text!r} is between {low:g} and {high:g}, not {raw}.", field=field
            )
        values[key] = value
    if colon and not values:
        raise InvalidInput(f"{text!r} has a ':' but no settings after it.", field=field)
    return ProfileSpec(name, **values)

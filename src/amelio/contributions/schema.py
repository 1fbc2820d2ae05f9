"""``MartyContributionV1``: one browser's result for one leased task.

It sits beside ``MartyFeedbackEventV1`` (:mod:`amelio.feedback.schema`) and is built
the same way: strict pydantic ``TypedDict``s (JSON types only, unknown fields
refused everywhere, so a typo or a field from a newer client never passes
silently), exported as a JSON Schema that ``GET /v1/contributions/schema`` serves.

The schema checks what a result says about itself: every vector has
``result.dimensions`` finite numbers, consent was granted, ids look like ids.
What needs the task (the digest, the task type, how many vectors, the model's
dimensions) is checked by :mod:`amelio.contributions.service` against the lease.

The per-tier CPU budgets live here too: they are part of the contract the
client's controller (``amelio.js``) and the server both enforce.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Required, get_args

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict

from amelio.feedback.schema import DEVICE_TIERS, ULID_PATTERN, DeviceTier

__all__ = [
    "CPU_SECONDS_PER_HOUR",
    "DEVICE_TIERS",
    "MAX_DIMENSIONS",
    "MAX_VECTORS",
    "PURPOSES",
    "TASK_TYPES",
    "Contribution",
    "MartyContributionV1",
    "contribution_adapter",
    "json_schema",
]

TaskType = Literal["embed_documents"]
Purpose = Literal["search_index"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)
PURPOSES: tuple[str, ...] = get_args(Purpose)

#: CPU-seconds per hour one client of a tier may give (the page cannot raise them; the
#: server enforces them from the ``computeMs`` each result reports).
CPU_SECONDS_PER_HOUR: dict[str, int] = {
    "HIGH+": 120, "HIGH": 90, "MID+": 60, "MID": 45, "LOW+": 30, "LOW": 15, "DEGRADED": 0}
assert set(CPU_SECONDS_PER_HOUR) == set(DEVICE_TIERS)

#: The most vectors one result may carry (``contributions_batch`` is at most this).
MAX_VECTORS = 64
#: The most dimensions a vector may have (WordLlama's are 256).
MAX_DIMENSIONS = 4096
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_HOUR_MS = 3_600_000

_STRICT = ConfigDict(extra="forbid", strict=True)
_ok = with_config(_STRICT)

Ulid = Annotated[str, Field(pattern=ULID_PATTERN, description="A ULID the server issued.")]
Ms = Annotated[int, Field(ge=0, description="Unix milliseconds.")]
Number = Annotated[float, Field(allow_inf_nan=False)]
Vector = Annotated[list[Number], Field(min_length=1, max_length=MAX_DIMENSIONS)]


@_ok
class Result(TypedDict):
    """The vectors, one per input text, in order: unit vectors (L2-normalised)."""

    model: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$",
                                description="The model the task named, e.g. wordllama.")]
    dimensions: Annotated[int, Field(ge=1, le=MAX_DIMENSIONS)]
    vectors: Annotated[list[Vector], Field(min_length=1, max_length=MAX_VECTORS)]


def _same_dimensions(result: Result) -> Result:
    for i, vector in enumerate(result["vectors"]):
        if len(vector) != result["dimensions"]:
            raise ValueError(f"vector {i} has {len(vector)} numbers; dimensions says "
                             f"{result['dimensions']}")
    return result


CheckedResult = Annotated[Result, AfterValidator(_same_dimensions)]


@_ok
class Timings(TypedDict, total=False):
    """When the work happened (the client's clock) and the CPU time it took."""

    leasedMs: Ms
    startedMs: Ms
    finishedMs: Ms
    computeMs: Required[Annotated[float, Field(
        ge=0, le=_HOUR_MS, allow_inf_nan=False,
        description="CPU milliseconds the result took; counted against the client's "
        "hourly budget.")]]


@_ok
class Consent(TypedDict):
    """Only results computed with the person's consent may be sent."""

    compute: Literal["granted"]
    purpose: Annotated[Purpose, Field(description="The purpose consented to; it must be "
                                      "the task's.")]


@_ok
class Contribution(TypedDict, total=False):
    """One result for one leased task."""

    contributionVersion: Required[Literal["v1"]]
    taskId: Required[Ulid]
    leaseId: Required[Ulid]
    clientToken: Required[Annotated[str, Field(min_length=1, max_length=512, description=(
        "The clientToken GET /v1/contributions/tasks returned."))]]
    taskType: Required[TaskType]
    inputDigest: Required[Annotated[str, Field(pattern=DIGEST_PATTERN, description=(
        "The task's inputDigest, echoed."))]]
    result: Required[CheckedResult]
    deviceTier: Required[DeviceTier]
    clientVersion: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,63}$")]
    timings: Required[Timings]
    consent: Required[Consent]


MartyContributionV1 = Contribution
"""One contribution; validate with :func:`contribution_adapter`."""

_ADAPTER: TypeAdapter[Contribution] = TypeAdapter(MartyContributionV1)


def contribution_adapter() -> TypeAdapter[Contribution]:
    """The compiled validator (built once)."""
    return _ADAPTER


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one contribution (draft 2020-12), as served."""
    schema = {k: v for k, v in _ADAPTER.json_schema().items()
              if k not in ("title", "description")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://amelio.dev/schemas/MartyContributionV1.json",
        "title": "MartyContributionV1",
        "description": "One browser's result for one task leased from GET "
        "/v1/contributions/tasks. POST it as JSON to /v1/contributions.",
        **schema,
    }

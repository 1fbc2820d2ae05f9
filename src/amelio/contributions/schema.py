"""``MartyContributionV1``: one browser's result for one leased task.

It sits beside ``MartyFeedbackEventV1`` (:mod:`amelio.feedback.schema`) and is built
the same way: strict pydantic ``TypedDict``s (JSON types only, unknown fields
refused everywhere, so a typo or a field from a newer client never passes
silently), exported as a JSON Schema that ``GET /v1/contributions/schema`` serves.

The schema checks what a result says about itself: ``result.vectors`` is one base64
string (standard alphabet, padded) of the n×d little-endian float32 matrix, row-major,
whose byte length is a multiple of ``result.dimensions`` × 4 and whose numbers are all
finite; consent was granted; ids look like ids. Why binary and not a JSON array of
numbers: a vector of 256 floats is ~5 KB of JSON that pydantic would validate number by
number (and the server store as JSON text); as float32 bytes it is 1 KB (1.4 KB in
base64) that ``numpy.frombuffer`` reads at once, which is most of what makes lending
compute cheaper for the server than embedding itself.
What needs the task (the digest, the task type, how many vectors, the model's
dimensions) is checked by :mod:`amelio.contributions.results` against the lease.

The per-tier CPU budgets live here too: they are part of the contract the
client's controller (``amelio.js``) and the server both enforce.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, Required, get_args

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationInfo, with_config
from typing_extensions import TypedDict

from amelio.feedback.schema import DEVICE_TIERS, ULID_PATTERN, DeviceTier

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt

__all__ = [
    "CPU_SECONDS_PER_HOUR",
    "DEVICE_TIERS",
    "HOUR_MS",
    "MAX_DIMENSIONS",
    "MAX_VECTORS",
    "MAX_VECTORS_CHARS",
    "PURPOSES",
    "TASK_TYPES",
    "Contribution",
    "MartyContributionV1",
    "contribution_adapter",
    "decode_vectors",
    "encode_vectors",
    "input_digest",
    "json_schema",
    "vectors_from_bytes",
]

TaskType = Literal["embed_documents"]
Purpose = Literal["search_index"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)
PURPOSES: tuple[str, ...] = get_args(Purpose)

#: CPU-seconds per hour one client of a tier may give (the page cannot raise them; the
#: server enforces them from the ``computeMs`` each result reports).
CPU_SECONDS_PER_HOUR: dict[str, int] = {
    "HIGH+": 120,
    "HIGH": 90,
    "MID+": 60,
    "MID": 45,
    "LOW+": 30,
    "LOW": 15,
    "DEGRADED": 0,
}
assert set(CPU_SECONDS_PER_HOUR) == set(DEVICE_TIERS)

#: The most vectors one result may carry (``contributions_batch`` is at most this).
MAX_VECTORS = 256
#: The most dimensions a vector may have (WordLlama's are 256). With MAX_VECTORS, it
#: bounds a result's matrix to 1 MiB (1.4 MB in base64), under ``max_request_bytes``.
MAX_DIMENSIONS = 1024
#: The longest ``result.vectors``: the base64 of MAX_VECTORS × MAX_DIMENSIONS float32s.
MAX_VECTORS_CHARS = 4 * -(-MAX_VECTORS * MAX_DIMENSIONS * 4 // 3)
#: Standard base64 (RFC 4648 §4: ``+/``, ``=`` padding), whole quanta only.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
HOUR_MS = 3_600_000

_STRICT = ConfigDict(extra="forbid", strict=True)
_ok = with_config(_STRICT)

Ulid = Annotated[str, Field(pattern=ULID_PATTERN, description="A ULID the server issued.")]
Ms = Annotated[int, Field(ge=0, description="Unix milliseconds.")]


def input_digest(texts: Sequence[str]) -> str:
    """``sha256:`` + the hex SHA-256 of the texts' compact JSON (the protocol's digest)."""
    raw = json.dumps(list(texts), ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(raw.encode("utf-8")).hexdigest()


def encode_vectors(vectors: Any) -> str:
    """The wire form of ``vectors`` (an n×d array or list of lists): base64 of the
    little-endian float32 matrix, row-major."""
    import numpy as np

    return base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode()


def decode_vectors(text: str, dimensions: int) -> npt.NDArray[np.float32]:
    """The n×``dimensions`` matrix ``text`` encodes (:func:`encode_vectors`' inverse);
    ValueError, saying what is wrong, when it is not one of finite float32 numbers."""
    import numpy as np

    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("vectors is not standard base64 (A-Z a-z 0-9 + /, = padding)") from None
    row = dimensions * 4
    if not raw or len(raw) % row:
        raise ValueError(
            f"vectors decodes to {len(raw)} bytes, not a whole number of "
            f"vectors of {dimensions} float32 ({row} bytes each)"
        )
    matrix = vectors_from_bytes(raw, dimensions)
    if len(matrix) > MAX_VECTORS:
        raise ValueError(f"vectors holds {len(matrix)} vectors; at most {MAX_VECTORS}")
    if not np.isfinite(matrix).all():
        bad = int(np.argmin(np.isfinite(matrix).all(axis=1)))
        raise ValueError(f"vector {bad} has a number that is not finite (NaN or infinity)")
    return matrix


def vectors_from_bytes(raw: bytes, dimensions: int) -> npt.NDArray[np.float32]:
    """The matrix of the wire form's bytes (what the server also stores), read in place:
    one definition of the layout, for the result a client sends and the one kept."""
    import numpy as np

    return np.frombuffer(raw, dtype="<f4").reshape(-1, dimensions).astype(np.float32, copy=False)


@_ok
class Result(TypedDict):
    """The vectors, one per input text, in order: unit vectors (L2-normalised)."""

    model: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$",
            description="The model the task named, e.g. wordllama.",
        ),
    ]
    dimensions: Annotated[int, Field(ge=1, le=MAX_DIMENSIONS)]
    vectors: Annotated[
        str,
        Field(
            min_length=4,
            max_length=MAX_VECTORS_CHARS,
            pattern=BASE64_PATTERN,
            json_schema_extra={
                "contentEncoding": "base64",
                "contentMediaType": "application/octet-stream",
            },
            description="One base64 string (standard alphabet, padded) of the n×dimensions "
            "matrix of little-endian float32 numbers, row-major: vector i is bytes "
            "[4·i·dimensions, 4·(i+1)·dimensions); n is the task's number of texts.",
        ),
    ]


def _decodable(result: Result, info: ValidationInfo) -> Result:
    """The contract's own check, for anyone validating a body with
    :func:`contribution_adapter`. The server skips it (``context={"decode": False}``)
    because it decodes the vectors anyway, once, to use them."""
    if (info.context or {}).get("decode", True):
        decode_vectors(result["vectors"], result["dimensions"])
    return result


CheckedResult = Annotated[Result, AfterValidator(_decodable)]


@_ok
class Timings(TypedDict, total=False):
    """When the work happened (the client's clock) and the CPU time it took."""

    leasedMs: Ms
    startedMs: Ms
    finishedMs: Ms
    computeMs: Required[
        Annotated[
            float,
            Field(
                ge=0,
                le=HOUR_MS,
                allow_inf_nan=False,
                description="CPU milliseconds the result took; counted against the client's "
                "hourly budget.",
            ),
        ]
    ]


@_ok
class Consent(TypedDict):
    """Only results computed with the person's consent may be sent."""

    compute: Literal["granted"]
    purpose: Annotated[
        Purpose, Field(description="The purpose consented to; it must be the task's.")
    ]


@_ok
class Contribution(TypedDict, total=False):
    """One result for one leased task."""

    contributionVersion: Required[Literal["v1"]]
    taskId: Required[Ulid]
    leaseId: Required[Ulid]
    clientToken: Required[
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=512,
                description=("The clientToken GET /v1/contributions/tasks returned."),
            ),
        ]
    ]
    taskType: Required[TaskType]
    inputDigest: Required[
        Annotated[
            str, Field(pattern=DIGEST_PATTERN, description=("The task's inputDigest, echoed."))
        ]
    ]
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
    schema = {k: v for k, v in _ADAPTER.json_schema().items() if k not in ("title", "description")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://amelio.dev/schemas/MartyContributionV1.json",
        "title": "MartyContributionV1",
        "description": "One browser's result for one task leased from GET "
        "/v1/contributions/tasks. POST it as JSON to /v1/contributions.",
        **schema,
    }

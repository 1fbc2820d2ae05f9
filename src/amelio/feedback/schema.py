"""``MartyFeedbackEventV1``: one typed event per interaction with search or the assistant.

The contract's shape: ``session``, ``context``, ``request``, ``result``,
``outcome`` and ``consent`` sections around an ``eventType``, plus one payload
section per explicit signal (``vote``, ``clarification``, ``hide``,
``problem``, ``correction``). Each event type is its own ``TypedDict`` in a
union discriminated by ``eventType``, so "a ``result_clicked`` needs a result and a
rank" is stated by the types (and by the JSON Schema they export) rather than
by hand-written checks, and a payload section on the wrong type is an unknown
field. Unknown fields are rejected everywhere: a typo never passes silently.

Validation is strict (JSON types only: ``"3"`` is not a number), so the stored
event holds the values the client sent, not coerced copies. The sections are
``TypedDict``s rather than models because validating into plain dicts is two to
three times faster (validation is the largest single cost of ingestion; see
``benchmarks/feedback_ingest.py``); pydantic still checks every field and exports
the same JSON Schema.

What the client may send that is never stored: raw ``session.sessionId`` and
``session.userId`` (replaced by server-salted hashes) and
``request.feedbackToken`` (checked, then dropped). See :mod:`amelio.feedback.collector`.
"""

from typing import Annotated, Any, Literal, Required, get_args

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict
from ulid import ULID

__all__ = [
    "DEVICE_TIERS",
    "EVENT_TYPES",
    "EXPLICIT_TYPES",
    "IMPLICIT_TYPES",
    "FeedbackEvent",
    "MartyFeedbackEventV1",
    "event_adapter",
    "json_schema",
    "new_event_id",
]

ExplicitType = Literal[
    "vote_up",
    "vote_down",
    "clarification_chosen",
    "result_pinned",
    "result_hidden",
    "report_problem",
    "correction_inline",
]
ImplicitType = Literal[
    "result_clicked",
    "result_dwell_time",
    "query_reformulated",
    "query_abandoned",
    "action_executed",
    "action_cancelled",
    "marty_response_replaced",
]
DeviceTier = Literal["HIGH+", "HIGH", "MID+", "MID", "LOW+", "LOW", "DEGRADED"]

EXPLICIT_TYPES: tuple[str, ...] = get_args(ExplicitType)
IMPLICIT_TYPES: tuple[str, ...] = get_args(ImplicitType)
EVENT_TYPES: tuple[str, ...] = EXPLICIT_TYPES + IMPLICIT_TYPES
DEVICE_TIERS: tuple[str, ...] = get_args(DeviceTier)

#: Crockford base32, 48-bit time then 80 random bits; either case (ULIDs are
#: case-insensitive), stored upper-case.
ULID_PATTERN = r"^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"
#: The seed's ``base32_8ch``: what the server's hashes look like.
HASH8_PATTERN = r"^[A-Z2-7]{8}$"
_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"

Id = Annotated[
    str, Field(pattern=_ID_PATTERN, description="An opaque identifier (a UUID or similar).")
]
Key = Annotated[str, Field(pattern=_KEY_PATTERN)]
Hash8 = Annotated[str, Field(pattern=HASH8_PATTERN)]
Text = Annotated[str, Field(max_length=2000)]
Ms = Annotated[int, Field(ge=0, le=7 * 86_400_000)]


_STRICT = ConfigDict(extra="forbid", strict=True)
_ok = with_config(_STRICT)


@_ok
class Session(TypedDict, total=False):
    """Who, pseudonymously. Send ``sessionId`` (or an opaque ``sessionIdHash``); the
    server stores only its own daily-salted hash of it."""

    sessionId: Annotated[
        str,
        Field(min_length=1, max_length=200, description="Raw session id; hashed, never stored."),
    ]
    userId: Annotated[
        str, Field(min_length=1, max_length=200, description="Raw user id; hashed, never stored.")
    ]
    sessionIdHash: Annotated[Hash8, Field(description="Re-keyed by the server.")]
    userIdHash: Annotated[Hash8, Field(description="Re-keyed by the server.")]
    rolesHash: Hash8
    locale: Annotated[str, Field(pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$", max_length=35)]


def _one_identity(session: Session) -> Session:
    if ("sessionId" in session) == ("sessionIdHash" in session):
        raise ValueError("give exactly one of sessionId and sessionIdHash")
    if "userId" in session and "userIdHash" in session:
        raise ValueError("give at most one of userId and userIdHash")
    return session


CheckedSession = Annotated[Session, AfterValidator(_one_identity)]


@_ok
class Context(TypedDict, total=False):
    """Where in the product the event happened."""

    routeId: Annotated[str, Field(max_length=200)]
    view: Key
    embed: bool
    filtersFingerprint: Key
    deviceTier: DeviceTier


@_ok
class _RequestFields(TypedDict, total=False):
    intentKey: Key
    structuredUnderstandingHash: Key
    modelBundleVersion: Key
    rankProfile: Key
    alpha: Annotated[float, Field(ge=0, le=1)]
    feedbackToken: Annotated[
        str,
        Field(
            max_length=512,
            description="The search response's token for queryId; required with queryId.",
        ),
    ]


@_ok
class Request(_RequestFields, total=False):
    """The search query or assistant answer the event is about."""

    requestId: Id
    queryId: Id
    branch: Key


@_ok
class QueryRequest(_RequestFields, total=False):
    """A request about a search query: ``queryId`` (and its token) required."""

    requestId: Id
    queryId: Required[Id]
    branch: Key


@_ok
class AnswerRequest(_RequestFields, total=False):
    """A request about an assistant answer: ``requestId`` required."""

    requestId: Required[Id]
    queryId: Id
    branch: Key


@_ok
class VoteRequest(_RequestFields, total=False):
    """A vote's request: ``requestId`` and ``branch`` required."""

    requestId: Required[Id]
    queryId: Id
    branch: Required[Key]


DocId = Annotated[str, Field(min_length=1, max_length=256)]
Rank = Annotated[int, Field(ge=1, le=10_000)]


@_ok
class _ResultFields(TypedDict, total=False):
    tableId: Annotated[int, Field(ge=0)]
    rowId: Annotated[int, Field(ge=0)]
    scoreVespa: float
    scoreCrossEncoder: float


@_ok
class Result(_ResultFields, total=False):
    """The search result the event is about."""

    docId: DocId
    rankShown: Rank


@_ok
class DocResult(_ResultFields, total=False):
    """A result named by ``docId``."""

    docId: Required[DocId]
    rankShown: Rank


@_ok
class RankedResult(_ResultFields, total=False):
    """A result named by ``docId`` at the rank it was shown."""

    docId: Required[DocId]
    rankShown: Required[Rank]


@_ok
class _OutcomeFields(TypedDict, total=False):
    reformulatedAfter: bool
    actionExecuted: bool
    ttftMs: Ms
    ttfsMs: Ms


@_ok
class Outcome(_OutcomeFields, total=False):
    """What followed: dwell, reformulation, action, answer timings."""

    dwellMs: Ms


@_ok
class DwellOutcome(_OutcomeFields, total=False):
    """An outcome with ``dwellMs`` required."""

    dwellMs: Required[Ms]


@_ok
class Consent(TypedDict):
    """Only ``telemetry: granted`` events are stored; the others are counted as dropped."""

    telemetry: Literal["granted", "denied", "unknown"]


@_ok
class Vote(TypedDict, total=False):
    """👍 / 👎 on an answer."""

    score: Required[
        Annotated[int, Field(ge=1, le=5, description="How strongly, 1 to 5 (a thumb sends 1).")]
    ]
    comment: Text


@_ok
class Clarification(TypedDict):
    """The clarification option a person picked."""

    clarificationId: Id
    optionKey: Key


@_ok
class Hide(TypedDict, total=False):
    """Why a result was hidden."""

    reason: Annotated[str, Field(max_length=500)]


@_ok
class Problem(TypedDict):
    """A reported problem."""

    category: Key
    freeText: Text


@_ok
class Correction(TypedDict):
    """An inline correction of a recognized entity."""

    slot: Key
    beforeValue: Annotated[str, Field(max_length=500)]
    afterValue: Annotated[str, Field(max_length=500)]


@_ok
class _Event(TypedDict, total=False):
    eventVersion: Required[Literal["v1"]]
    eventId: Required[
        Annotated[
            str,
            Field(
                pattern=ULID_PATTERN,
                description="A ULID, unique per event: sending it again is answered `duplicate`.",
            ),
        ]
    ]
    eventTimeMs: Required[
        Annotated[int, Field(ge=0, description="When it happened, Unix milliseconds.")]
    ]
    session: Required[CheckedSession]
    context: Context
    consent: Annotated[Consent, Field(description="Absent means not granted.")]


@_ok
class _WithOutcome(_Event, total=False):
    outcome: Outcome


# The shapes events share; each type below adds its eventType (and payload).


@_ok
class _AboutAnswer(_WithOutcome, total=False):
    request: Required[AnswerRequest]
    result: Result


@_ok
class _AboutQuery(_WithOutcome, total=False):
    request: Required[QueryRequest]
    result: Result


@_ok
class _AboutShownResult(_WithOutcome, total=False):
    request: Required[QueryRequest]
    result: Required[RankedResult]


@_ok
class _VoteEvent(_WithOutcome, total=False):
    request: Required[VoteRequest]
    result: Result
    vote: Required[Vote]


# -- explicit signals: what a person says on purpose -----------------------------------


@_ok
class VoteUp(_VoteEvent, total=False):
    """👍 on an answer."""

    eventType: Required[Literal["vote_up"]]


@_ok
class VoteDown(_VoteEvent, total=False):
    """👎 on an answer."""

    eventType: Required[Literal["vote_down"]]


@_ok
class ClarificationChosen(_AboutAnswer, total=False):
    """A clarification chip was clicked."""

    eventType: Required[Literal["clarification_chosen"]]
    clarification: Required[Clarification]


@_ok
class ResultPinned(_AboutShownResult, total=False):
    """A result was pinned as relevant."""

    eventType: Required[Literal["result_pinned"]]


@_ok
class ResultHidden(_WithOutcome, total=False):
    """A result was hidden or dismissed."""

    eventType: Required[Literal["result_hidden"]]
    request: Required[QueryRequest]
    result: Required[DocResult]
    hide: Hide


@_ok
class ReportProblem(_AboutAnswer, total=False):
    """A problem was reported (free-text modal)."""

    eventType: Required[Literal["report_problem"]]
    problem: Required[Problem]


@_ok
class CorrectionInline(_AboutAnswer, total=False):
    """A recognized entity (place, date) was corrected inline."""

    eventType: Required[Literal["correction_inline"]]
    correction: Required[Correction]


# -- implicit signals: what a person's behaviour shows ---------------------------------


@_ok
class ResultClicked(_AboutShownResult, total=False):
    """A result was clicked (CTR per query, doc and rank)."""

    eventType: Required[Literal["result_clicked"]]


@_ok
class ResultDwellTime(_Event, total=False):
    """Time spent on a result before coming back (8 s or more counts as positive)."""

    eventType: Required[Literal["result_dwell_time"]]
    request: Required[QueryRequest]
    result: Required[DocResult]
    outcome: Required[DwellOutcome]


@_ok
class QueryReformulated(_AboutQuery, total=False):
    """A new query within 30 s, similar to the last (a sign of dissatisfaction)."""

    eventType: Required[Literal["query_reformulated"]]


@_ok
class QueryAbandoned(_AboutQuery, total=False):
    """Results opened then closed without interaction."""

    eventType: Required[Literal["query_abandoned"]]


@_ok
class ActionExecuted(_AboutAnswer, total=False):
    """A proposed action was confirmed and succeeded."""

    eventType: Required[Literal["action_executed"]]


@_ok
class ActionCancelled(_AboutAnswer, total=False):
    """A proposed action's dialog was closed without confirming."""

    eventType: Required[Literal["action_cancelled"]]


@_ok
class MartyResponseReplaced(_AboutAnswer, total=False):
    """A speculative answer was replaced by the authoritative one."""

    eventType: Required[Literal["marty_response_replaced"]]


FeedbackEvent = (
    VoteUp
    | VoteDown
    | ClarificationChosen
    | ResultPinned
    | ResultHidden
    | ReportProblem
    | CorrectionInline
    | ResultClicked
    | ResultDwellTime
    | QueryReformulated
    | QueryAbandoned
    | ActionExecuted
    | ActionCancelled
    | MartyResponseReplaced
)

MartyFeedbackEventV1 = Annotated[FeedbackEvent, Field(discriminator="eventType")]
"""One feedback event; validate with :func:`event_adapter`."""

_ADAPTER: TypeAdapter[FeedbackEvent] = TypeAdapter(MartyFeedbackEventV1)


def event_adapter() -> TypeAdapter[FeedbackEvent]:
    """The compiled validator (built once: building it is the slow part)."""
    return _ADAPTER


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one event (draft 2020-12), as served and printed."""
    schema = _ADAPTER.json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://amelio.dev/schemas/MartyFeedbackEventV1.json",
        "title": "MartyFeedbackEventV1",
        "description": "One feedback event. POST a JSON array or NDJSON of these to "
        "/v1/feedback/events. Events with request.queryId must carry the search "
        "response's request.feedbackToken.",
        **schema,
    }


def new_event_id() -> str:
    """A fresh ULID for ``eventId`` (time-ordered, so the store's indexes stay hot)."""
    return str(ULID())

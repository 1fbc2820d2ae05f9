"""Feedback events: schema, tokens, collector and the signed event store.

Every interaction with search or the assistant becomes a typed
``MartyFeedbackEventV1`` (a versioned contract), collected fire-and-forget without ever
storing who the person is. :class:`Collector` is the pipeline (validate,
consent, token, anonymize, rate-limit, store); :mod:`~amelio.feedback.tokens`
is shared with search, which issues the ``feedbackToken`` the collector checks.
"""

from amelio.feedback.collector import (
    Collector,
    EventStatus,
    IngestResult,
    feedback_stats,
    parse_batch,
    purge_events,
    verify_events,
)
from amelio.feedback.schema import (
    EVENT_TYPES,
    EXPLICIT_TYPES,
    IMPLICIT_TYPES,
    FeedbackEvent,
    MartyFeedbackEventV1,
    json_schema,
    new_event_id,
)
from amelio.feedback.store import PurgeReport, VerifyReport
from amelio.feedback.tokens import TokenClaims, TokenSigner, token_signer

__all__ = [
    "EVENT_TYPES",
    "EXPLICIT_TYPES",
    "IMPLICIT_TYPES",
    "Collector",
    "EventStatus",
    "FeedbackEvent",
    "IngestResult",
    "MartyFeedbackEventV1",
    "PurgeReport",
    "TokenClaims",
    "TokenSigner",
    "VerifyReport",
    "feedback_stats",
    "json_schema",
    "new_event_id",
    "parse_batch",
    "purge_events",
    "token_signer",
    "verify_events",
]

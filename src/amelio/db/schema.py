"""The tables, as SQLAlchemy Core.

Migrations under ``migrations/versions`` create exactly these (a test compares
them); this module is what the code queries against. Each domain module owns the
reads and writes of its own tables.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

__all__ = [
    "UTCDateTime",
    "api_key_projects",
    "api_keys",
    "aware",
    "benchmark_runs",
    "benchmark_scenarios",
    "contribution_clients",
    "contribution_leases",
    "contribution_results",
    "contribution_task_docs",
    "contribution_tasks",
    "eval_results",
    "feedback",
    "feedback_chain",
    "feedback_events",
    "feedback_tombstones",
    "finding_evidence",
    "findings",
    "improve_runs",
    "interactions",
    "judgment_lists",
    "judgments",
    "knowledge_chunks",
    "knowledge_notebooks",
    "knowledge_queue",
    "knowledge_sources",
    "learning_files",
    "learnings",
    "llm_cache",
    "metadata",
    "pinned_cases",
    "projects",
    "proposals",
    "rollouts",
    "routing_state",
    "search_experiments",
    "search_impressions",
    "search_session_marks",
    "search_signals",
    "search_state",
    "shadow_answers",
    "skill_events",
    "skill_versions",
    "skills",
    "utcnow",
]

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """A datetime with a zone: naive ones (user input, SQLite) are read as UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always reads back as an aware UTC datetime.

    PostgreSQL keeps the zone but SQLite drops it; normalizing here, once, means
    no code reading a timestamp has to remember which database it runs on.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else aware(value).astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else aware(value)


Timestamp = UTCDateTime()

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("created_at", Timestamp, nullable=False),
)

# A skill row is the *current* state of one skill in one scope: global
# (project_id NULL) or a project's fork. Its history lives in skill_versions.
skills = sa.Table(
    "skills",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column(
        "project_id", sa.Integer, sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=True
    ),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("triggers", sa.JSON, nullable=False),
    sa.Column("keywords", sa.JSON, nullable=False),
    sa.Column("extra", sa.JSON, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("evals", sa.JSON, nullable=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.UniqueConstraint("project_id", "name", name="uq_skills_project_name"),
    sa.Index(
        "uq_skills_global_name",
        "name",
        unique=True,
        sqlite_where=sa.text("project_id IS NULL"),
        postgresql_where=sa.text("project_id IS NULL"),
    ),
)

skill_versions = sa.Table(
    "skill_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "skill_id", sa.Integer, sa.ForeignKey("skills.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("triggers", sa.JSON, nullable=False),
    sa.Column("keywords", sa.JSON, nullable=False),
    sa.Column("extra", sa.JSON, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("evals", sa.JSON, nullable=True),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("author", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.UniqueConstraint("skill_id", "version", name="uq_skill_versions_skill_version"),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("prefix", sa.String(16), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("last_used_at", Timestamp, nullable=True),
    sa.Column("revoked_at", Timestamp, nullable=True),
    sa.CheckConstraint("role IN ('admin', 'bot', 'client')", name="role"),
)

# The projects a key is bound to. A key with no rows here is global: every
# admin key, and bot or client keys made before keys could be scoped.
api_key_projects = sa.Table(
    "api_key_projects",
    metadata,
    sa.Column(
        "key_id", sa.Integer, sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "project_id", sa.Integer, sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    ),
)

# One row per rule the reflect loop learned. Rules are never rewritten
# wholesale: each is added, retired or edited on its own, and a retired rule
# stays for the record.
learnings = sa.Table(
    "learnings",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("skill", sa.String(100), nullable=True),
    sa.Column("rule", sa.Text, nullable=False),
    sa.Column("rule_key", sa.String(64), nullable=False),
    sa.Column("source", sa.String(20), nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("helpful", sa.Integer, nullable=False),
    sa.Column("harmful", sa.Integer, nullable=False),
    sa.Column("occurrences", sa.Integer, nullable=False),
    sa.Column("retired_reason", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("last_seen_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    # Provenance: one entry per correction that taught or repeated the rule
    # ({"source", "feedbackId", "interactionId", "author", "at"}), oldest first.
    sa.Column("sources", sa.JSON, nullable=False, server_default="[]"),
    sa.Column("author", sa.String(200), nullable=True),
    sa.Column("reviewed_by", sa.String(200), nullable=True),
    sa.Column("reviewed_at", Timestamp, nullable=True),
    # Why a candidate waits for a person (review queue, a flagged pattern, a contradiction).
    sa.Column("held_reason", sa.Text, nullable=True),
    # A candidate that contradicts an active learning proposes to supersede it.
    sa.Column("supersedes_id", sa.Integer, nullable=True),
    sa.Column("superseded_by", sa.Integer, nullable=True),
    # A pending proposal to retire an active learning, with the figures behind it.
    sa.Column("retire_proposal", sa.JSON(none_as_null=True), nullable=True),
    # The rule's unit vector (float32) under the search embedding model, for merging
    # paraphrases; NULL when none was available when it was written.
    sa.Column("embedding", sa.LargeBinary, nullable=True),
    sa.UniqueConstraint("project_id", "rule_key", name="uq_learnings_project_rule"),
    sa.CheckConstraint("source IN ('fixit', 'negative', 'manual', 'sage')", name="source"),
    sa.CheckConstraint("status IN ('candidate', 'active', 'superseded', 'retired')", name="status"),
    sa.Index("ix_learnings_project_id_status", "project_id", "status"),
)

# What Amelio last wrote to each project's learnings.md, so a hand edit is
# noticed (the file's hash differs) and read back before the next prompt.
learning_files = sa.Table(
    "learning_files",
    metadata,
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("written_at", Timestamp, nullable=False),
)

# One row per answer the assistant gave: enough to rebuild every quality metric
# and to show a person exactly what the model saw (prompt hash, hint, learnings).
interactions = sa.Table(
    "interactions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("user_ref", sa.String(64), nullable=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("hinted", sa.JSON, nullable=False),
    sa.Column("applied_skill", sa.String(100), nullable=True),
    sa.Column("skill_version", sa.Integer, nullable=True),
    sa.Column("prompt_hash", sa.String(64), nullable=False),
    sa.Column("learning_ids", sa.JSON, nullable=False),
    sa.Column("answer", sa.Text, nullable=False),
    sa.Column("success", sa.Boolean, nullable=False),
    sa.Column("provider", sa.String(50), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("llm_ms", sa.Float, nullable=False),
    sa.Column("total_ms", sa.Float, nullable=False),
    sa.Column("input_tokens", sa.Integer, nullable=True),
    sa.Column("output_tokens", sa.Integer, nullable=True),
    sa.Column("cost_usd", sa.Float, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    # Set by the client that logged an answer made elsewhere: a retry with the same
    # key finds this row instead of adding a second (NULLs never collide).
    sa.Column("idempotency_key", sa.String(200), nullable=True),
    sa.Index("ix_interactions_project_skill", "project_id", "applied_skill"),
    sa.Index("uq_interactions_project_idempotency", "project_id", "idempotency_key", unique=True),
)

# A candidate model's answer to a live request (amelio.improve.shadow): never shown,
# checked by the applied skill's rules, compared by ``amelio bench --model --shadow``.
shadow_answers = sa.Table(
    "shadow_answers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "interaction_id",
        sa.Integer,
        sa.ForeignKey("interactions.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("skill", sa.String(100), nullable=True),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("answer", sa.Text, nullable=False),
    sa.Column("success", sa.Boolean, nullable=False),
    sa.Column("passed_share", sa.Float, nullable=False),
    sa.Column("failed_rules", sa.JSON, nullable=False),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("ix_shadow_answers_model", "model", "project_id"),
)

eval_results = sa.Table(
    "eval_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "interaction_id",
        sa.Integer,
        sa.ForeignKey("interactions.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("rule_id", sa.String(200), nullable=False),
    sa.Column("rule_name", sa.Text, nullable=False),
    sa.Column("rule_type", sa.String(100), nullable=False),
    sa.Column("severity", sa.String(10), nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
)

# A person's reaction to an answer. One row per (interaction, user, channel):
# a user's repeated 👍/👎 replaces their earlier vote, Fix It is its own channel.
# Messages the learned router learns a skill from (amelio.routing.examples): a kept
# answer's message (👍, evals passed, no correction) or one an admin added. An admin's
# removal sets removed_at and keeps the row, so a later 👍 on the same interaction
# does not bring the example back; a later 👎 or Fix It deletes it.
routing_examples = sa.Table(
    "routing_examples",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("skill", sa.String(100), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("source", sa.String(20), nullable=False),
    sa.Column(
        "interaction_id",
        sa.Integer,
        sa.ForeignKey("interactions.id", ondelete="CASCADE"),
        nullable=True,
        unique=True,
    ),
    sa.Column("author", sa.String(200), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("removed_at", Timestamp, nullable=True),
    sa.Column("removed_by", sa.String(200), nullable=True),
    sa.Index("ix_routing_examples_project_skill", "project_id", "skill"),
    sa.CheckConstraint("source IN ('interaction', 'manual')", name="source"),
)

# One row: the routing generation, a random number that every write to what a router
# is built from (a skill's row, a routing example) replaces in its own transaction.
# A process that kept a router outside the database (amelio.routing.snapshot) knows it
# is current by reading this one value. Random rather than counted, so that two
# databases (a restored backup, a copy that went its own way) never share a value
# for different skills.
routing_state = sa.Table(
    "routing_state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)

feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "interaction_id",
        sa.Integer,
        sa.ForeignKey("interactions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("user_ref", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(10), nullable=False),
    sa.Column("kind", sa.String(10), nullable=False),
    sa.Column("comment", sa.Text, nullable=True),
    sa.Column("learning_id", sa.Integer, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.UniqueConstraint("interaction_id", "user_ref", "channel", name="uq_feedback_vote"),
    sa.CheckConstraint("kind IN ('up', 'down', 'fixit')", name="kind"),
)


# A proposed new content for one skill (its row: global or a project's fork),
# waiting for a person. base_version is the skill's version it was written
# against: approving it after the skill moved on would overwrite that change.
# A proposal for a skill that does not exist yet (the knowledge generator's)
# has no skill_id, base_version 0, and its front matter in new_skill.
proposals = sa.Table(
    "proposals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "skill_id",
        sa.Integer,
        sa.ForeignKey("skills.id", ondelete="CASCADE"),
        nullable=True,
        index=True,
    ),
    sa.Column("skill_name", sa.String(100), nullable=False),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("base_version", sa.Integer, nullable=False),
    sa.Column("current_content", sa.Text, nullable=False),
    sa.Column("proposed_content", sa.Text, nullable=False),
    sa.Column("rationale", sa.Text, nullable=False),
    sa.Column("evidence", sa.JSON, nullable=False),
    sa.Column("status", sa.String(12), nullable=False),
    sa.Column("proposed_by", sa.String(12), nullable=False),
    sa.Column("author", sa.String(200), nullable=False),
    sa.Column("decided_by", sa.String(200), nullable=True),
    sa.Column("decision_reason", sa.Text, nullable=True),
    sa.Column("decided_at", Timestamp, nullable=True),
    sa.Column("result_version", sa.Integer, nullable=True),
    sa.Column("run_id", sa.Integer, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("new_skill", sa.JSON(none_as_null=True), nullable=True),
    # For a routing proposal (amelio skills suggest-triggers): the triggers and keywords
    # approval gives the skill, its content unchanged.
    sa.Column("routing", sa.JSON(none_as_null=True), nullable=True),
    # The skill's eval rules as approval sets them (a finding's mined rule added), or
    # NULL when the proposal leaves the rules alone.
    sa.Column("evals", sa.JSON(none_as_null=True), nullable=True),
    sa.CheckConstraint(
        "status IN ('pending', 'approved', 'rejected', 'superseded')", name="status"
    ),
    sa.CheckConstraint(
        "proposed_by IN ('template', 'sage', 'generator', 'human')", name="proposed_by"
    ),
)

# A canary rollout of an approved version (amelio.improve.rollouts): ``percent`` of
# conversations get ``to_version``, the rest ``from_version``, until a check pauses it
# on a regression or promotes it (percent → 50 → 100, then ``done``). One running or
# paused rollout per skill; ``history`` lists every change of stage or status.
rollouts = sa.Table(
    "rollouts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column(
        "skill_id", sa.Integer, sa.ForeignKey("skills.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("skill_name", sa.String(100), nullable=False),
    sa.Column("proposal_id", sa.Integer, nullable=True),
    sa.Column("from_version", sa.Integer, nullable=False),
    sa.Column("to_version", sa.Integer, nullable=False),
    sa.Column("percent", sa.Integer, nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("started_by", sa.String(200), nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("stage_started_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("ended_at", Timestamp, nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("last_check", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("history", sa.JSON, nullable=False),
    sa.Index("ix_rollouts_skill_status", "skill_id", "status"),
    sa.CheckConstraint("percent BETWEEN 1 AND 100", name="percent"),
    sa.CheckConstraint("status IN ('running', 'paused', 'aborted', 'done')", name="status"),
)

# The evolution log: every change to a skill, and every decision about one,
# with who, when, why and the proposal it came from.
skill_events = sa.Table(
    "skill_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "skill_id",
        sa.Integer,
        sa.ForeignKey("skills.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("version", sa.Integer, nullable=True),
    sa.Column("proposal_id", sa.Integer, nullable=True),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)

# One row per `amelio improve` run: its report, so the last nightly summary is
# always at hand (the dashboard shows it).
improve_runs = sa.Table(
    "improve_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=False),
    sa.Column("mode", sa.String(12), nullable=False),
    sa.Column("report", sa.JSON, nullable=False),
)


# A case that must keep passing: an answer people kept (👍, or pinned by hand), or a
# message a Fix It corrected (with the correction). Every benchmark of a proposal for
# the skill re-answers it with both versions; a proposal under which a pinned case
# newly fails one of the skill's rules cannot pass. An unpinned case keeps its row
# (unpinned_at), so a later 👍 on the same answer does not pin it again.
pinned_cases = sa.Table(
    "pinned_cases",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("skill", sa.String(100), nullable=False),
    sa.Column(
        "interaction_id",
        sa.Integer,
        sa.ForeignKey("interactions.id", ondelete="CASCADE"),
        nullable=False,
        unique=True,
    ),
    sa.Column("source", sa.String(10), nullable=False),
    sa.Column("correction", sa.Text, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("author", sa.String(200), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("unpinned_at", Timestamp, nullable=True),
    sa.Column("unpinned_by", sa.String(200), nullable=True),
    sa.Index("ix_pinned_cases_project_skill", "project_id", "skill"),
    sa.CheckConstraint("source IN ('manual', 'thumbs_up', 'fixit', 'finding')", name="source"),
)


# One A/B benchmark of a proposal: old and new skill content through the same
# pipeline, scored by eval rules and an LLM judge.
benchmark_runs = sa.Table(
    "benchmark_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "proposal_id",
        sa.Integer,
        sa.ForeignKey("proposals.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("verdict", sa.String(10), nullable=True),
    sa.Column("improvement_pct", sa.Float, nullable=True),
    sa.Column("summary", sa.JSON, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=True),
)

benchmark_scenarios = sa.Table(
    "benchmark_scenarios",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "run_id",
        sa.Integer,
        sa.ForeignKey("benchmark_runs.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("source", sa.String(10), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("old_output", sa.Text, nullable=False),
    sa.Column("new_output", sa.Text, nullable=False),
    sa.Column("result", sa.JSON, nullable=False),
)

# Identical LLM calls answer from here: a re-run benchmark costs nothing.
llm_cache = sa.Table(
    "llm_cache",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("response", sa.JSON, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)


# Feedback events (MartyFeedbackEventV1), append-only. ``seq`` is the position in
# the HMAC chain (assigned under the chain head's lock, never reused); the
# indexed columns are copies of payload fields for aggregation, and ``payload``
# is the stored event's canonical JSON, exactly what the signature covers.
# Times are Unix milliseconds: exact, comparable on every database, and a
# natural range key for partitioning on PostgreSQL.
feedback_events = sa.Table(
    "feedback_events",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("event_id", sa.String(26), nullable=False, unique=True),
    sa.Column("event_type", sa.String(32), nullable=False),
    sa.Column("event_time_ms", sa.BigInteger, nullable=False),
    sa.Column("received_ms", sa.BigInteger, nullable=False),
    sa.Column("session_hash", sa.String(8), nullable=False),
    sa.Column("user_hash", sa.String(8), nullable=True),
    sa.Column("query_id", sa.String(128), nullable=True),
    sa.Column("request_id", sa.String(128), nullable=True),
    sa.Column("doc_id", sa.String(256), nullable=True),
    sa.Column("rank_shown", sa.Integer, nullable=True),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("signature", sa.String(64), nullable=False),
    sa.Index("ix_feedback_events_query", "query_id", "event_type"),
    sa.Index("ix_feedback_events_doc", "doc_id", "event_type"),
    sa.Index("ix_feedback_events_type_time", "event_type", "event_time_ms"),
    sa.Index("ix_feedback_events_time", "event_time_ms"),
)

# The head of the feedback chain: one row, MAC-signed, so deleting the newest
# events (or rewinding the head) shows. ``anchor_*`` is where the chain starts
# after purges.
feedback_chain = sa.Table(
    "feedback_chain",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("last_signature", sa.String(64), nullable=False),
    sa.Column("anchor_seq", sa.BigInteger, nullable=False),
    sa.Column("anchor_signature", sa.String(64), nullable=False),
    sa.Column("mac", sa.String(64), nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)

# Events purged out of the middle of the chain (an old event that arrived late):
# their signature, MAC-signed, so the chain still verifies across the gap.
feedback_tombstones = sa.Table(
    "feedback_tombstones",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("signature", sa.String(64), nullable=False),
    sa.Column("mac", sa.String(64), nullable=False),
    sa.Column("purged_ms", sa.BigInteger, nullable=False),
)


# The knowledge loop. A notebook belongs to a project and holds
# sources (a ticket, a wiki page, a file), each cut into chunks; the lexical
# index is the postings table, so it survives restarts and is shared by every
# process on the database. ``updated_at`` on a source is the source's own
# updatedAt: an equal one re-sent is a no-op, a newer one replaces it.
knowledge_notebooks = sa.Table(
    "knowledge_notebooks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.UniqueConstraint("project_id", "name", name="uq_knowledge_notebooks_project_name"),
)

knowledge_sources = sa.Table(
    "knowledge_sources",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "notebook_id",
        sa.Integer,
        sa.ForeignKey("knowledge_notebooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("source_id", sa.String(256), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("indexed_at", Timestamp, nullable=False),
    sa.Column("chunk_count", sa.Integer, nullable=False),
    sa.UniqueConstraint("notebook_id", "source_id", name="uq_knowledge_sources_notebook_source"),
)

# ``start_char``/``end_char`` locate the chunk in its source's text, so a
# citation can show exactly where an answer came from. ``embedding`` is set only
# when an embedding model is configured (semantic retrieval is optional).
knowledge_chunks = sa.Table(
    "knowledge_chunks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "source_row_id",
        sa.Integer,
        sa.ForeignKey("knowledge_sources.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("notebook_id", sa.Integer, nullable=False, index=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("start_char", sa.Integer, nullable=False),
    sa.Column("end_char", sa.Integer, nullable=False),
    sa.Column("token_count", sa.Integer, nullable=False),
    sa.Column("embedding_model", sa.String(200), nullable=True),
    sa.Column("embedding", sa.JSON(none_as_null=True), nullable=True),
)

# The durable sync queue: a row per source waiting to be indexed. ``pending``
# rows are claimed for ``claimed_until`` (a crashed worker's claim expires);
# after ``knowledge_sync_tries`` failed tries a row becomes ``dead`` (a dead
# letter) until someone retries it. Indexed rows are deleted.
knowledge_queue = sa.Table(
    "knowledge_queue",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "notebook_id",
        sa.Integer,
        sa.ForeignKey("knowledge_notebooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("source_id", sa.String(256), nullable=False),
    sa.Column("source_updated_at", Timestamp, nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("status", sa.String(8), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", Timestamp, nullable=False),
    sa.Column("claimed_until", Timestamp, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("failed_at", Timestamp, nullable=True),
    sa.CheckConstraint("status IN ('pending', 'dead')", name="status"),
    sa.Index("ix_knowledge_queue_due", "status", "next_attempt_at"),
    sa.Index("ix_knowledge_queue_source", "notebook_id", "source_id"),
)


# Search. Every search response is one impression: the ranking a person
# was shown, the only source of "shown at rank k" counts (clients never report
# impressions). Signals are per (normalized query, docId) and are derived from
# impressions and feedback events by an incremental aggregator whose checkpoint
# lives in search_state, in the same transaction as the signals it wrote, so a
# re-run never counts twice. search_session_marks caps what one session can add.
search_impressions = sa.Table(
    "search_impressions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("query_id", sa.String(64), nullable=False, unique=True),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("project", sa.String(100), nullable=False),
    sa.Column("query_norm", sa.Text, nullable=False),
    sa.Column("profile", sa.String(32), nullable=False),
    sa.Column("alpha", sa.Float, nullable=False),
    sa.Column("beta", sa.Float, nullable=False),
    sa.Column("results", sa.JSON, nullable=False),
    sa.Column("explored", sa.Boolean, nullable=False),
    # The upper rank k when exploration swapped the results at k and k + 1: the
    # randomized experiment that measures position bias.
    sa.Column("swapped_rank", sa.Integer, nullable=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False, index=True),
    # Who searched, hashed with the daily salt of feedback events (NULL: the client
    # named no one, and the response counts as its own session): the aggregator caps
    # what one session or user adds to a query's examinations.
    sa.Column("session_hash", sa.String(8), nullable=True),
    sa.Column("user_hash", sa.String(8), nullable=True),
    # The interleaving experiment that served the response (NULL: none), and what
    # each ranker contributed ({"method", "teams": "abba…", "a": [rank in A of each
    # shown result, or null], "b": [...]}), so a click is credited to A or B.
    sa.Column("experiment", sa.String(100), nullable=True, index=True),
    sa.Column("interleaving", sa.JSON(none_as_null=True), nullable=True),
)

search_experiments = sa.Table(
    "search_experiments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("project", sa.String(100), nullable=False),
    # Each side's profile: {"profile", "alpha", "beta", "exploration"}.
    sa.Column("a", sa.JSON, nullable=False),
    sa.Column("b", sa.JSON, nullable=False),
    sa.Column("share", sa.Float, nullable=False),
    sa.Column("method", sa.String(16), nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("stopped_ms", sa.BigInteger, nullable=True),
    sa.Index("ix_search_experiments_project_status", "project", "status"),
    sa.CheckConstraint("status IN ('running', 'stopped')", name="status"),
    sa.CheckConstraint("method IN ('team-draft', 'balanced')", name="method"),
    sa.CheckConstraint("share > 0 AND share <= 1", name="share"),
)

judgment_lists = sa.Table(
    "judgment_lists",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("source", sa.String(10), nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    # How the list was built: the model and rubric, the click thresholds, the queries.
    sa.Column("meta", sa.JSON, nullable=False),
    sa.CheckConstraint("source IN ('clicks', 'llm', 'human')", name="source"),
)

judgments = sa.Table(
    "judgments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "list_id",
        sa.Integer,
        sa.ForeignKey("judgment_lists.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("query", sa.String(1000), nullable=False),
    sa.Column("doc_id", sa.String(256), nullable=False),
    # 0 (not relevant) to 3 (perfect); NULL: a human list's pair not graded yet.
    sa.Column("grade", sa.Integer, nullable=True),
    # What the grade rests on: click counts, the LLM's reply, the person.
    sa.Column("evidence", sa.JSON, nullable=False),
    sa.Column("graded_by", sa.String(200), nullable=True),
    sa.Column("graded_ms", sa.BigInteger, nullable=True),
    sa.UniqueConstraint("list_id", "query", "doc_id"),
    sa.CheckConstraint("grade IS NULL OR grade BETWEEN 0 AND 3", name="grade"),
)

search_signals = sa.Table(
    "search_signals",
    metadata,
    sa.Column("query_norm", sa.String(1000), primary_key=True),
    sa.Column("doc_id", sa.String(256), primary_key=True),
    sa.Column("impressions", sa.Integer, nullable=False),
    sa.Column("impressions_by_rank", sa.JSON, nullable=False),
    sa.Column("clicks_by_rank", sa.JSON, nullable=False),
    sa.Column("clicks", sa.Integer, nullable=False),
    sa.Column("dwell_clicks", sa.Integer, nullable=False),
    sa.Column("bounces", sa.Integer, nullable=False, server_default="0"),
    sa.Column("pins", sa.Integer, nullable=False),
    sa.Column("hides", sa.Integer, nullable=False),
    sa.Column("votes_up", sa.Integer, nullable=False),
    sa.Column("votes_down", sa.Integer, nullable=False),
    sa.Column("reformulations", sa.Integer, nullable=False),
    sa.Column("abandonments", sa.Integer, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.Column("actors", sa.Integer, nullable=False, server_default="0"),
    sa.Column("viewers", sa.Integer, nullable=False, server_default="0"),
)

search_session_marks = sa.Table(
    "search_session_marks",
    metadata,
    sa.Column("query_norm", sa.String(1000), primary_key=True),
    sa.Column("doc_id", sa.String(256), primary_key=True),
    sa.Column("session_hash", sa.String(8), primary_key=True),
    sa.Column("kind", sa.String(8), primary_key=True),
    sa.Column("hits", sa.Integer, nullable=False),
)

search_state = sa.Table(
    "search_state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("event_seq", sa.BigInteger, nullable=False),
    sa.Column("impression_id", sa.Integer, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("propensities", sa.JSON, nullable=False),
    sa.Column("recent", sa.JSON, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)

# -- Telegram: one-time invite codes, and the chats they linked -----------------------
# A code is stored as its SHA-256 only (like an API key): the database never holds a
# usable code. ``used_at`` is set once, by the UPDATE that redeems it, so two chats
# racing for one code cannot both win.
telegram_invites = sa.Table(
    "telegram_invites",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("code_hash", sa.String(64), nullable=False, unique=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("created_by", sa.String(200), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("used_at", Timestamp, nullable=True),
    sa.Column("used_by_chat", sa.BigInteger, nullable=True),
    sa.CheckConstraint("role IN ('user', 'admin')", name="role"),
)

# A chat is linked to one project with one role; linking it again (a new code)
# replaces the link. Telegram chat ids go beyond 32 bits (groups are -100…).
telegram_chats = sa.Table(
    "telegram_chats",
    metadata,
    sa.Column("chat_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("title", sa.String(200), nullable=True),
    sa.Column("linked_by", sa.String(200), nullable=True),
    sa.Column("linked_at", Timestamp, nullable=False),
    sa.Column(
        "invite_id",
        sa.Integer,
        sa.ForeignKey("telegram_invites.id", ondelete="SET NULL"),
        nullable=True,
    ),
    sa.Index("ix_telegram_chats_project_role", "project_id", "role"),
    sa.CheckConstraint("role IN ('user', 'admin')", name="role"),
)

# Every update the bot took, by bot and update id. Telegram delivers an update again
# when its delivery was not confirmed (a webhook answer lost, a poller stopped before
# it confirmed), so an update acts only if its row is new. Rows are kept a week:
# Telegram keeps an update a day at most, and after a week without updates it
# starts a bot's ids anew at random.
telegram_updates = sa.Table(
    "telegram_updates",
    metadata,
    sa.Column("bot_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("update_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("received_at", Timestamp, nullable=False),
    sa.Index("ix_telegram_updates_received_at", "received_at"),
)

# -- the schedule: one row per job, claimed by one replica at a time ------------------
# ``due_at`` is the scheduled time the last claim was for: a replica claims a time
# only if it is later than ``due_at`` (or that run was interrupted: ``outcome`` still
# "running" with its lease expired), by one conditional UPDATE, so each scheduled
# time runs once however many replicas race for it.
scheduled_jobs = sa.Table(
    "scheduled_jobs",
    metadata,
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=True),
    sa.Column("lease_expires_at", Timestamp, nullable=True),
    sa.Column("due_at", Timestamp, nullable=True),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("outcome", sa.String(20), nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("runs", sa.Integer, nullable=False, default=0),
    sa.CheckConstraint("outcome IN ('running', 'ok', 'error')", name="outcome"),
)

# -- idle compute lent by browsers (MartyContributionV1) -------------------------------
# A client is one browser the server issued a signed clientToken to; ``trust`` rises
# when its results agree with others' and falls sharply when a spot-check proves
# one wrong. A task is a batch of search documents to embed; ``input`` holds the
# exact texts and ``input_digest`` their SHA-256, checked again against the store
# before accepted vectors are written. contribution_task_docs claims each document
# for one open task (its primary key is the guard against two processes tasking
# the same document); the claim goes when the task is accepted or cancelled.
# ``(task_id, client_id)`` is unique in leases and in results: a client never gets
# a task twice, and a result counts once (so a result's lease is the one of its task and
# client). A client's tasks leased, results and CPU time are counted from the leases
# and results, not stored twice. Times are Unix milliseconds. A client's ``network``
# is a keyed digest of the network prefix that minted it and ``key_id`` the API key
# that did (amelio.contributions.trust: two clients of one network, or minted together
# by one key, never verify each other); ``checked`` counts its results the server
# confirmed itself (a new client is on probation until enough are). A task's
# ``cost_ms`` is the server's estimate of its CPU cost to a browser, charged against
# the budget of each client it is leased to.
contribution_clients = sa.Table(
    "contribution_clients",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column("tier", sa.String(10), nullable=False),
    sa.Column("trust", sa.Float, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("last_seen_ms", sa.BigInteger, nullable=False),
    sa.Column("network", sa.String(32), nullable=False, server_default=""),
    sa.Column("key_id", sa.Integer, nullable=True),
    sa.Column("checked", sa.Integer, nullable=False, server_default="0"),
)

contribution_tasks = sa.Table(
    "contribution_tasks",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column("task_type", sa.String(32), nullable=False),
    sa.Column("purpose", sa.String(32), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("doc_ids", sa.JSON, nullable=False),
    sa.Column("input_digest", sa.String(71), nullable=False),
    sa.Column("input", sa.JSON, nullable=False),
    sa.Column("state", sa.String(10), nullable=False),
    sa.Column("spot_checks", sa.Integer, nullable=False, default=0),
    sa.Column("disagreements", sa.Integer, nullable=False, default=0),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("accepted_ms", sa.BigInteger, nullable=True),
    sa.Column("cost_ms", sa.Float, nullable=False, server_default="0"),
    sa.Index("ix_contribution_tasks_state", "state", "model"),
    sa.CheckConstraint("state IN ('open', 'accepted', 'cancelled')", name="state"),
)

contribution_task_docs = sa.Table(
    "contribution_task_docs",
    metadata,
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("doc_id", sa.String(256), primary_key=True),
    sa.Column(
        "task_id",
        sa.String(26),
        sa.ForeignKey("contribution_tasks.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
)

contribution_leases = sa.Table(
    "contribution_leases",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column(
        "task_id",
        sa.String(26),
        sa.ForeignKey("contribution_tasks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column(
        "client_id",
        sa.String(26),
        sa.ForeignKey("contribution_clients.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("leased_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(10), nullable=False),
    sa.UniqueConstraint("task_id", "client_id", name="uq_contribution_leases_task_client"),
    sa.CheckConstraint("state IN ('leased', 'submitted')", name="state"),
)

contribution_results = sa.Table(
    "contribution_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "task_id",
        sa.String(26),
        sa.ForeignKey("contribution_tasks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column(
        "client_id",
        sa.String(26),
        sa.ForeignKey("contribution_clients.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("vectors", sa.LargeBinary, nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("compute_ms", sa.Float, nullable=False),
    sa.Column("received_ms", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("task_id", "client_id", name="uq_contribution_results_task_client"),
    sa.Index("ix_contribution_results_client_time", "client_id", "received_ms"),
    sa.CheckConstraint("status IN ('pending', 'accepted', 'rejected', 'cancelled')", name="status"),
)


# Findings (amelio.improve.findings): failures grouped into named problems. A
# finding keeps its id run after run: new evidence is matched to its centroid.
findings = sa.Table(
    "findings",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("kind", sa.String(10), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("terms", sa.JSON, nullable=False),
    sa.Column("skills", sa.JSON, nullable=False),
    # The mean unit vector of its evidence (float32), or NULL without an embedder.
    sa.Column("centroid", sa.LargeBinary, nullable=True),
    sa.Column("evidence_count", sa.Integer, nullable=False),
    # Its evidence's share of the window's failures when last updated.
    sa.Column("share", sa.Float, nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("proposal_ids", sa.JSON, nullable=False),
    # The proposed fix: a mined rule that catches it, with its rates (amelio.improve.mining).
    sa.Column("fix", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("first_seen", Timestamp, nullable=False),
    sa.Column("last_seen", Timestamp, nullable=False),
    sa.Column("closed_at", Timestamp, nullable=True),
    sa.Column("closed_by", sa.String(200), nullable=True),
    sa.Column("close_reason", sa.Text, nullable=True),
    sa.Column("reopened_at", Timestamp, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Index("ix_findings_project_id_status", "project_id", "status"),
    sa.CheckConstraint("kind IN ('assistant', 'search')", name="kind"),
    sa.CheckConstraint("status IN ('open', 'fixing', 'closed', 'reopened')", name="status"),
)

# One row per piece of evidence, in at most one finding of its project: a 👎 or Fix
# It (``feedback:ID``), an interaction that failed a rule (``interaction:ID``).
finding_evidence = sa.Table(
    "finding_evidence",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column(
        "finding_id",
        sa.Integer,
        sa.ForeignKey("findings.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("ref", sa.String(100), nullable=False),
    sa.Column("skill", sa.String(100), nullable=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("seen_at", Timestamp, nullable=False),
    sa.Column("added_at", Timestamp, nullable=False),
    sa.UniqueConstraint("project_id", "ref", name="uq_finding_evidence_project_ref"),
)

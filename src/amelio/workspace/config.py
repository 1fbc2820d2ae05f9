"""One settings table: ``AMELIO_*`` environment variables over ``amelio.toml``.

Every setting is a field of :class:`Settings` with its default and help text, so
``amelio config show`` and the docs are generated from this one place. Settings
are read once and frozen: code that wants another value builds another object
instead of mutating a shared one.

Precedence, highest first: explicit keyword overrides (tests, CLI flags), the
environment, the workspace's ``amelio.toml``, the defaults below.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from amelio.errors import ConfigError
from amelio.workspace.discovery import CONFIG_FILE, DATA_DIR, ENV_PREFIX, find_workspace

__all__ = ["SettingRow", "Settings", "load_settings"]


class Settings(BaseSettings):
    """Amelio's settings. Field descriptions are the user-facing help text."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    workspace: Path = Field(
        default=Path("."),
        description="Workspace folder (amelio.toml, skills/, .amelio/). "
        "Found from --workspace, AMELIO_WORKSPACE or the nearest amelio.toml above cwd.",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL. Empty means sqlite:///<workspace>/.amelio/amelio.db; "
        "postgresql+psycopg://user@host/db switches to PostgreSQL (amelio[postgres]; run "
        "`amelio db upgrade` after switching).",
    )
    interaction_commit: Literal["durable", "fast"] = Field(
        default="durable",
        description="On PostgreSQL, whether an interaction's commit waits for the "
        "write-ahead log to reach the disk (durable) or not (fast: a database server crash "
        "may lose the last few hundred milliseconds of interactions, never corrupt one). "
        "SQLite is unaffected (WAL, synchronous=NORMAL).",
    )
    llm_provider: str = Field(
        default="none",
        description="LLM provider: anthropic, openai, local, claude-cli, none, or one a plugin "
        "registers. With none, everything that needs no LLM works.",
    )
    llm_model: str = Field(default="", description="Model name passed to the provider.")
    llm_base_url: str = Field(
        default="", description="Base URL of an OpenAI-compatible server (vLLM, Ollama, ...)."
    )
    llm_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="API key; falls back to ANTHROPIC_API_KEY or OPENAI_API_KEY.",
    )
    llm_timeout: float = Field(
        default=30.0, gt=0, description="Seconds before an LLM call is abandoned (each try)."
    )
    llm_max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries, with backoff, on 429, 5xx and connection errors.",
    )
    llm_max_tokens: int = Field(default=1024, ge=1, description="Most tokens an answer may use.")
    llm_model_path: str = Field(
        default="",
        description="The GGUF file the local provider runs in process (amelio[local]); "
        "see docs/assistant.md.",
    )
    llm_context_tokens: int = Field(
        default=4096,
        ge=256,
        le=131_072,
        description="The local provider's context window: prompt and answer together. "
        "Each worker holds its KV cache.",
    )
    llm_threads: int = Field(
        default=0,
        ge=0,
        le=512,
        description="CPU threads the local provider computes with (0: every core; "
        "llama.cpp's own default is half of them).",
    )
    llm_price_input_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million input tokens, to record costs (0: unknown)."
    )
    llm_price_output_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million output tokens (0: unknown)."
    )
    claude_cli_path: str = Field(
        default="claude", description="The Claude CLI executable for llm_provider=claude-cli."
    )
    apply_skill: Literal["top", "none"] = Field(
        default="top",
        description="Whose eval rules check an answer: the top routed skill's, or none.",
    )
    prompt_skill_body: Literal["top", "none"] = Field(
        default="top",
        description="Put the applied skill's rulebook in the prompt (top), or "
        "leave skill bodies to the client, as Claude CLI does with CLAUDE.md (none).",
    )
    openai_footnotes: bool = Field(
        default=False,
        description="Append eval footnotes to the answer text of "
        "/v1/chat/completions (a request may also ask with amelio.footnotes or the "
        "X-Amelio-Footnotes header); they are always in the response's amelio object.",
    )
    openai_max_n: int = Field(
        default=4,
        ge=1,
        le=128,
        description="Most choices (n) one /v1/chat/completions request may ask for; more "
        "is a 400. Its max_tokens and max_completion_tokens are lowered to llm_max_tokens.",
    )
    pin_on_thumbs_up: bool = Field(
        default=True,
        description="Pin a 👍 answer, and a message a Fix It corrected with its correction, "
        "as a case its skill must keep passing (amelio cases).",
    )
    distill_learnings: bool = Field(
        default=False,
        description="With an LLM configured, turn a 👎 or Fix It comment into "
        "one concrete rule before storing it as a learning.",
    )
    secret_key: SecretStr = Field(
        default=SecretStr(""),
        description="Key for hashing user ids and signing tokens. Empty: "
        "a random key kept in .amelio/secret_key (set it explicitly when several servers "
        "share a database).",
    )
    underperform_min_applied: int = Field(
        default=3, ge=1, description="Uses a skill needs before it can be judged underperforming."
    )
    underperform_min_success_rate: float = Field(
        default=0.8, ge=0, le=1, description="Success rate under which a skill underperforms."
    )
    underperform_mode: Literal["seed", "wilson"] = Field(
        default="seed",
        description="seed: the observed rate decides; wilson: only when the "
        "Wilson bound shows the rate is below the threshold with `underperform_confidence`.",
    )
    underperform_confidence: float = Field(
        default=0.95, gt=0.5, lt=1, description="Confidence of the wilson mode's bound."
    )
    notify_webhook_url: str = Field(
        default="", description="Where `amelio improve` POSTs its report (JSON); empty: off."
    )
    notify_webhook_secret: SecretStr = Field(
        default=SecretStr(""),
        description="HMAC-SHA256 key for the webhook's X-Amelio-Signature header.",
    )
    public_url: str = Field(
        default="",
        description="The service's public address, for the links in "
        "notifications (a proposal's opens /proposals/{id} on the dashboard).",
    )
    cors_origins: str = Field(
        default="",
        pattern=r"^\s*(?:(?:\*|[a-z][a-z0-9+.-]*://[^\s,/]+)\s*(?:,\s*|$))*$",
        description="Comma-separated origins (scheme://host[:port], no path) whose pages may "
        "call the API from the browser, as amelio.js does (empty: no CORS; * any origin).",
    )
    telegram_token: SecretStr = Field(
        default=SecretStr(""),
        description="The bot's token from BotFather, for `amelio "
        "telegram run` and the telegram notifier (empty: off).",
    )
    telegram_api_url: str = Field(
        default="https://api.telegram.org",
        description="The Bot API server: requests go to "
        "{url}/bot{token}/{method} (a local Bot API server, or a test server).",
    )
    telegram_allowed_chats: str = Field(
        default="",
        description="Comma-separated chat ids that may use the bot (empty: any "
        "chat that redeems an invite code).",
    )
    sage_model: str = Field(default="", description="Model Sage writes with (empty: llm_model).")
    sage_max_skills: int = Field(
        default=5, ge=1, le=50, description="Most skills one Sage analysis rewrites."
    )
    sage_timeout: float = Field(default=30.0, gt=0, description="Seconds Sage waits for the LLM.")
    shadow_model: str = Field(
        default="",
        description="A candidate model (same provider) that also answers shadow_rate of "
        "live requests, after the user has their answer; never shown, checked by the rules, "
        "compared by amelio bench --model NAME --shadow.",
    )
    shadow_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of live requests shadow_model answers too (0: none).",
    )
    judge_model: str = Field(
        default="", description="Model the benchmark judge uses (empty: llm_model)."
    )
    bench_scenarios: int = Field(
        default=8, ge=1, le=100, description="Scenarios per benchmark (3 reproduces the seed)."
    )
    bench_source: Literal["generated", "replay", "both"] = Field(
        default="both",
        description="Benchmark scenarios: generated by the LLM, replayed from "
        "logged messages, or both (replayed first).",
    )
    bench_swap: bool = Field(
        default=True,
        description="Judge both A/B orders and average (false: the seed's single random order).",
    )
    bench_tie_margin: float = Field(
        default=0.5,
        ge=0,
        le=10,
        description="A scenario whose combined scores differ by at most this is a tie.",
    )
    bench_min_judge_consistency: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="Share of scenarios the judge must prefer the same side of in both "
        "A/B orders for its scores to count in the verdict (below: rules only).",
    )
    bench_stop_early: bool = Field(
        default=True,
        description="Stop a benchmark once no verdict is reachable: when so many scenarios "
        "showed no difference that the rest could not make it significant.",
    )
    bench_max_pinned_cases: int = Field(
        default=20,
        ge=0,
        le=200,
        description="Pinned cases a benchmark re-answers with both versions (the newest; "
        "two LLM calls each, cached): one that newly fails a rule keeps the proposal from "
        "PASSED. 0: none.",
    )
    proposal_max_changed_lines: int = Field(
        default=30,
        ge=1,
        le=100_000,
        description="Lines a proposal may add or remove before it is marked large: a "
        "PASSED verdict alone does not clear a large one (a person reads the diff).",
    )
    proposal_rejected_similarity: float = Field(
        default=0.8,
        ge=0,
        le=1.01,
        description="A new proposal whose change is at least this like one a person "
        "rejected for the skill is not filed (409); above 1: never refused.",
    )
    improve_budget_tokens: int = Field(
        default=0,
        ge=0,
        description="Tokens `amelio improve --sage` and `amelio sage analyze` may spend on "
        "LLM calls (cached answers are free): the call that would go over is not made, "
        "and the report says what was left undone. 0: no bound.",
    )
    judge_repeats: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Times the judge scores each pair in each A/B order (the first at "
        "temperature 0, the others at judge_repeat_temperature); the scores are averaged.",
    )
    judge_repeat_temperature: float = Field(
        default=0.7,
        ge=0,
        le=2,
        description="Temperature of the judge's repeated draws (the first is at 0).",
    )
    judge_calibration_cases: int = Field(
        default=20,
        ge=0,
        le=500,
        description="Newest voted answers of a skill the judge scores in each benchmark, to "
        "measure its agreement with people (Cohen's κ; cached). 0: not measured.",
    )
    bench_min_judge_kappa: float = Field(
        default=0.6,
        ge=-1,
        le=1,
        description="Agreement with people (κ) a judge needs for its scores to count, once "
        "bench_min_judge_pairs pairs measure it; below, the rules and pinned cases decide.",
    )
    bench_min_judge_pairs: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="Pairs (voted answers, decided proposals) from which κ is trusted.",
    )
    bench_hold_out: bool = Field(
        default=True,
        description="Replay only messages a proposal was not written from (its evidence's "
        "writtenFrom); off only to measure what holding out is worth.",
    )
    bench_noise_floor: bool = Field(
        default=True,
        description="Also benchmark the old version against itself (A/A) in every "
        "scenario: a PASSED needs its interval's lower end above what that reaches.",
    )
    bench_confidence: float = Field(
        default=0.95, gt=0.5, lt=1, description="Confidence a PASSED or FAILED verdict needs."
    )
    feedback_max_events: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="Most feedback events one request may carry (413 beyond).",
    )
    feedback_max_bytes: int = Field(
        default=1_000_000,
        ge=1024,
        description="Largest feedback request body in bytes (413 "
        "beyond; max_request_bytes still caps every request).",
    )
    feedback_retention_days: int = Field(
        default=180,
        ge=1,
        description="Feedback events older than this are refused, and "
        "`amelio feedback purge` removes them by default.",
    )
    feedback_token_ttl: int = Field(
        default=86_400, ge=1, description="Seconds a search response's feedbackToken stays valid."
    )
    feedback_rate_key: float = Field(
        default=5000.0,
        ge=0,
        description="Feedback events per second one API key may send "
        "(token bucket refill, per server process; 0: unlimited).",
    )
    feedback_burst_key: int = Field(
        default=20_000,
        ge=1,
        description="Feedback events one API key may send at once (token bucket size).",
    )
    feedback_rate_session: float = Field(
        default=20.0,
        ge=0,
        description="Feedback events per second one session may send (0: unlimited).",
    )
    feedback_burst_session: int = Field(
        default=600,
        ge=1,
        description="Feedback events one session may send at once; keep it above "
        "feedback_max_events so that a full batch from one session can pass.",
    )
    pii_scrub: Literal["off", "events", "all"] = Field(
        default="events",
        description="Where e-mail addresses, phone, card and IBAN numbers "
        "and IP addresses are replaced before free text is stored: events (feedback events "
        "and search impressions), all (also interaction messages, answers, feedback "
        "comments and learnings) or off.",
    )
    ui_language: Literal["auto", "en", "fr"] = Field(
        default="auto",
        description="Dashboard language: en, fr, or auto (the browser's Accept-Language).",
    )
    warm_up: bool = Field(
        default=True,
        description="`amelio serve` loads the LLM SDK, each project's router "
        "and eval rules in the background as it starts, so the first answer does not wait "
        "for them.",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Also serve the Prometheus metrics without a "
        "key on this port (0: only GET /metrics on the API port, with an admin key).",
    )
    metrics_models: str = Field(
        default="",
        description="Comma-separated model names that get their own label in the "
        "amelio_llm_* metrics besides llm_model, sage_model and judge_model; any other model "
        "(one a caller names in /v1/chat/completions) is counted as other.",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="The address the metrics port listens on."
    )
    tracing: Literal["off", "otlp", "console", "global"] = Field(
        default="off",
        description="OpenTelemetry traces (amelio[otel]): otlp exports over "
        "OTLP/HTTP (OTEL_EXPORTER_OTLP_* variables), console prints them, global leaves them "
        "to the process's tracer provider, off.",
    )
    improve_schedule: str = Field(
        default="0 3 * * *",
        description="When `amelio serve` runs `amelio improve`: a cron "
        "expression (minute hour day month weekday) in `timezone`, or off.",
    )
    signals_schedule: str = Field(
        default="off",
        description="When `amelio serve` aggregates search signals (cron, "
        "or off: the search service aggregates as impressions arrive).",
    )
    rollouts_schedule: str = Field(
        default="* * * * *",
        description="When amelio serve checks running canary rollouts (cron, in timezone), "
        "or off (then run amelio rollouts check yourself).",
    )
    timezone: str = Field(
        default="UTC",
        description="The workspace's time zone (IANA name, e.g. Europe/Paris), for the schedules.",
    )
    schedule_catch_up: bool = Field(
        default=True,
        description="A scheduled run missed while no server was up runs once when one starts.",
    )
    schedule_lease_seconds: int = Field(
        default=600,
        ge=30,
        le=86_400,
        description="How long a replica's claim on a running "
        "job lasts without renewal (it renews while the job runs): a replica killed "
        "mid-run frees the job after this.",
    )
    knowledge_worker: bool = Field(
        default=True,
        description="`amelio serve` runs the knowledge sync worker in the "
        "background (false: drain the queue with `amelio knowledge drain`).",
    )
    knowledge_sync_tries: int = Field(
        default=3,
        ge=1,
        le=20,
        description="Tries a queued knowledge source gets before it becomes a dead letter.",
    )
    knowledge_sync_backoff: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="Seconds before a failed source's second try; "
        "each later try waits twice as long.",
    )
    knowledge_poll_interval: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="Seconds the sync worker sleeps when the queue "
        "has nothing due (a sync request wakes it at once).",
    )
    knowledge_chunk_chars: int = Field(
        default=1200,
        ge=200,
        le=20_000,
        description="Largest chunk a knowledge source is cut "
        "into, in characters (paragraphs and sentences are kept whole when they fit). "
        "Applies to sources indexed after a change.",
    )
    knowledge_top_k: int = Field(
        default=5, ge=1, le=50, description="Passages a knowledge query retrieves and cites."
    )
    knowledge_answer_timeout: float = Field(
        default=15.0,
        gt=0,
        description="Seconds a knowledge query waits for the LLM before answering extractively.",
    )
    knowledge_generate_timeout: float = Field(
        default=30.0, gt=0, description="Seconds the skill generator waits for the LLM."
    )
    knowledge_embedding_model: str = Field(
        default="",
        description="Embedding model for semantic retrieval in notebooks: wordllama "
        "(amelio[semantic]) or a sentence-transformers model (amelio[embeddings]); empty: "
        "lexical (BM25) only.",
    )
    search_profile: Literal["bm25", "semantic", "hybrid", "hybrid_with_feedback"] = Field(
        default="hybrid_with_feedback",
        description="Rank profile a search uses when the request names none.",
    )
    search_alpha: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Default weight of the semantic score in hybrid "
        "profiles (0: lexical only; above 0 needs amelio[semantic]).",
    )
    search_embedding_model: str = Field(
        default="wordllama",
        description="Embedding model of the semantic and hybrid profiles: "
        "wordllama (shipped with amelio[semantic], never downloaded) or a sentence-transformers "
        "model (amelio[embeddings]); empty: lexical only.",
    )
    search_beta: float = Field(
        default=1.0,
        ge=0,
        le=10,
        description="Weight of the feedback score in "
        "hybrid_with_feedback; 0 is the kill switch (exactly the hybrid ranking). 1 was "
        "the best tried on Cranfield's real judgments, over three seeds (docs/search.md).",
    )
    search_prior_weight: float = Field(
        default=10.0,
        gt=0,
        description="Expected examinations a document's feedback score is "
        "shrunk towards the average by, so a few clicks cannot swing it.",
    )
    search_session_cap: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Most examinations, clicks, dwells, bounces, pins, "
        "hides and votes one session (and one user) counts for one document on one query per "
        "UTC day: the guard against one actor steering ranking (clients send sessionId "
        "with POST /v1/search).",
    )
    search_min_actors: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Distinct people (by hashed session and user id) whose clicks, dwells, "
        "pins, hides or votes on one document for one query it takes before they move its "
        "rank freely; fewer move it at most 2 ranks, and their pins, hides and votes count "
        "for nothing. With search_session_cap, the guard against one actor steering "
        "ranking.",
    )
    search_exploration: float = Field(
        default=0.1,
        ge=0,
        le=0.5,
        description="Share of responses that swap two adjacent "
        "results (recorded in the impression): the randomized experiment that measures "
        "position bias.",
    )
    search_candidates: int = Field(
        default=100,
        ge=10,
        le=10_000,
        description="Lexical and semantic candidates a search "
        "re-ranks with hybrid and feedback scores.",
    )
    search_cache_size: int = Field(
        default=10_000,
        ge=0,
        description="Rankings kept in the warm-path cache (0: no cache); "
        "keyed by query, profile, alpha and signals version.",
    )
    search_thompson: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Share of hybrid_with_feedback responses ranked "
        "by Thompson sampling (each candidate's feedback score drawn from its posterior, "
        "recorded as explored), so documents with little evidence get shown and judged; 0: "
        "never explore.",
    )
    search_backend: str = Field(
        default="embedded",
        pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="Search engine: embedded (the default, tantivy), tantivy, fts5 (SQLite "
        "FTS5), vespa, or one a plugin adds.",
    )
    vespa_url: str = Field(default="", description="Vespa endpoint when search_backend=vespa.")
    contributions: bool = Field(
        default=False,
        description="Let browsers running amelio.js lend idle compute: they "
        "embed search documents that have no vector yet (GET /v1/contributions/tasks), and "
        "results two independent clients (or the server's own check) agree on are stored "
        "(off: no tasks are handed out). "
        "search_embedding_model must be wordllama.",
    )
    contributions_batch: int = Field(
        default=64,
        ge=1,
        le=256,
        description="Documents per contributed task (texts one "
        "browser embeds at once). Every task costs the server two leases and two results "
        "whatever its size, so larger tasks cost it less per document (benchmarks/"
        "client_compute.py: 3.5-4.7 CPU-s per 1,000 WordLlama documents in tasks of 8, "
        "0.9-1.9 in tasks of 64); 64 is still ~10-15 ms of a browser's time.",
    )
    contributions_lease_seconds: int = Field(
        default=120,
        ge=10,
        le=3600,
        description="Seconds a browser has to return a leased "
        "task; after that its result is refused (409) and the task goes to another.",
    )
    contributions_tolerance: float = Field(
        default=0.9999,
        gt=0,
        le=1,
        description="Cosine every vector of two contributed "
        "results (or of a result and the server's own) must reach for them to agree.",
    )
    contributions_new_clients_per_minute: int = Field(
        default=30,
        ge=0,
        description="New browser identities (GET /v1/contributions/tasks "
        "without a clientToken) a client key, and a remote address, may get per minute, "
        "with as many at once; beyond, 429 with Retry-After. Each is a row, and a flood of "
        "fresh identities is how one party would pose as many. 0: no limit.",
    )
    contributions_spot_check: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Share of agreeing contributions the server "
        "checks by embedding the texts itself (a disagreement is always checked).",
    )
    contributions_related_seconds: int = Field(
        default=120,
        ge=0,
        le=86_400,
        description="Browser identities one client key minted within this many seconds "
        "of each other never verify each other's results nor hold the same task, as "
        "identities minted from one network (IPv4 /24, IPv6 /48) never do: a script "
        "minting a pair at once is one contributor. 0: only the network counts.",
    )
    contributions_probation: int = Field(
        default=3,
        ge=0,
        le=1000,
        description="Results of a new browser identity the server checks by embedding "
        "a sample of their texts itself (8; a task that small whole, judged at once): a "
        "wrong one is rejected at once, a right one still needs an independent client's "
        "agreement. It leaves probation after this many passed (agreeing peers do not "
        "count). 0: no probation.",
    )
    contributions_network_tasks: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="Leased tasks the browser identities of one network (IPv4 /24, IPv6 "
        "/48) may hold at once, besides 8 for each identity, so that no group of "
        "identities can hold the queue.",
    )
    host: str = Field(default="127.0.0.1", description="Address `amelio serve` binds to.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port `amelio serve` binds to.")
    max_text_chars: int = Field(
        default=1_000_000,  # amelio.evals.MAX_TEXT_CHARS, what evaluate() takes unless told
        ge=1,
        description="Largest text (answer, message) the eval engine and API accept, in chars.",
    )
    system_prompt: str = Field(
        default="You are a helpful assistant. Follow the skills and learnings below.",
        description="Base system prompt that SKILLS_HINT and LEARNINGS are added to.",
    )
    router_scorer: str = Field(
        default="learned",
        description="Context-router scorer: learned (metadata, examples "
        "and embeddings), hybrid, keywords (the seed's), bm25 or one a plugin adds.",
    )
    router_embedding_model: str = Field(
        default="wordllama",
        description="Embeddings the learned router compares messages "
        "with skills and examples by: wordllama (amelio[semantic]; without it routing is "
        "lexical), a sentence-transformers model, or '' for lexical routing.",
    )
    router_min_score: float | None = Field(
        default=None,
        description="Out-of-scope threshold of the learned router: a message "
        "no skill scores above it gets no SKILLS_HINT. Unset: learned from the examples "
        "(1.5 until there are 20; 1.0 without embeddings); `amelio route MESSAGE --json` "
        "shows the threshold in force.",
    )
    router_max_examples: int = Field(
        default=50,
        ge=0,
        le=1000,
        description="Kept answers the learned router learns from "
        "per skill and project, newest first (SKILL.md examples come on top).",
    )
    router_limit: int = Field(
        default=5, ge=1, le=50, description="How many skills the SKILLS_HINT block lists."
    )
    learnings_max_chars: int = Field(
        default=2000, ge=0, description="Characters of learnings the prompt block may hold."
    )
    learnings_ordering: Literal["relevant", "newest", "helpful"] = Field(
        default="relevant",
        description="Which learnings fill the budget first: those closest in meaning "
        "to the message (embeddings; word overlap without them), the newest (the "
        "seed's rule) or those with the best helpful-minus-harmful record.",
    )
    learnings_header: str = Field(
        default="en", description="Header of the LEARNINGS block: 'en', 'fr' or your own text."
    )
    learnings_retire_min_harmful: int = Field(
        default=2,
        ge=1,
        description="A learning is retired when its harmful count passes "
        "its helpful count and is at least this.",
    )
    learnings_merge_cosine: float = Field(
        default=0.55,
        gt=0,
        le=1,
        description="Embedding cosine (search_embedding_model) at or above which a new "
        "learning that also shares some words with an existing one of its skill merges "
        "into it (measured: benchmarks/learnings.py).",
    )
    learnings_merge_similarity: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Content-word overlap (Jaccard) at or above which a new learning "
        "merges into an existing one of its skill without embeddings.",
    )
    findings_window_days: int = Field(
        default=14,
        ge=1,
        le=365,
        description="Days of failure evidence (👎, Fix It, answers failing a rule, "
        "searches that failed people) that amelio findings update groups into findings.",
    )
    findings_match_cosine: float = Field(
        default=0.35,
        gt=0,
        lt=1,
        description="Embedding cosine at or above which a failure joins a finding (its "
        "centroid), and at which new failures are grouped together (chosen by "
        "benchmarks/findings.py --sweep).",
    )
    findings_min_evidence: int = Field(
        default=3,
        ge=2,
        description="Failures a group needs to become a finding; smaller groups wait.",
    )
    findings_reopen_after: int = Field(
        default=3,
        ge=1,
        description="New failures matching a closed finding that reopen it.",
    )
    rollout_promote: Literal["auto", "manual"] = Field(
        default="auto",
        description="auto: a canary rollout whose stage succeeded moves on (its share, then "
        "50 %, then 100 %) at the next check; manual: it waits for amelio rollouts promote.",
    )
    rollout_canary_percent: int = Field(
        default=10,
        ge=1,
        le=99,
        description="The share of conversations a canary starts at when the Telegram card's "
        "or the dashboard's Canary button approves a proposal.",
    )
    rollout_stage_exposures: int = Field(
        default=500,
        ge=10,
        description="Answers of the new version a canary stage needs, with no regression "
        "found, before it succeeds.",
    )
    rollout_alpha: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description="False-alarm rate of a canary rollout's sequential test (mSPRT), shared "
        "by its three metrics (👎, Fix It, rule failures) and kept under continuous checks.",
    )
    learnings_review: Literal["auto", "queue"] = Field(
        default="auto",
        description="auto: a correction's learning is active at once; queue: it waits "
        "as a candidate until a person approves it. A learning that looks like a secret "
        "or a prompt injection always waits.",
    )
    learnings_stale_days: int = Field(
        default=30,
        ge=1,
        description="An active learning no prompt used for this many days becomes a "
        "retire proposal (amelio learnings audit lists it as stale).",
    )
    max_request_bytes: int = Field(
        default=2_000_000, ge=1024, description="Largest HTTP request body the service accepts."
    )

    @model_validator(mode="after")
    def _shadow_needs_a_model(self) -> Settings:
        if self.shadow_rate > 0 and not self.shadow_model.strip():
            raise ValueError(
                f"shadow_rate is {self.shadow_rate} but shadow_model is empty: name the "
                "model to shadow, or set shadow_rate to 0"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = init_settings.init_kwargs.get("workspace")  # type: ignore[attr-defined]
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            path = Path(toml_file) / CONFIG_FILE
            if path.is_file():
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    # -- derived values -------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.workspace / DATA_DIR

    @property
    def telegram_allowed_chat_ids(self) -> frozenset[int]:
        """``telegram_allowed_chats`` as ids; a value that is not one is a clear error."""
        ids = set()
        for part in self.telegram_allowed_chats.split(","):
            if part.strip():
                try:
                    ids.add(int(part.strip()))
                except ValueError:
                    raise ConfigError(
                        f"AMELIO_TELEGRAM_ALLOWED_CHATS: {part.strip()!r} is not a chat id "
                        "(integers, comma-separated)."
                    ) from None
        return frozenset(ids)

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'amelio.db').resolve()}"

    @property
    def effective_llm_api_key(self) -> str:
        key = self.llm_api_key.get_secret_value()
        if key:
            return key
        fallback = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
        env = fallback.get(self.llm_provider)
        return os.environ.get(env, "") if env else ""

    def rows(self) -> Iterator[SettingRow]:
        """The effective settings, secrets masked, each with where its value came from."""
        toml = _read_toml(self.workspace / CONFIG_FILE)
        for name, field in type(self).model_fields.items():
            value: Any = getattr(self, name)
            env_name = ENV_PREFIX + name.upper()
            if env_name in os.environ:
                source = "env"
            elif name in toml:
                source = CONFIG_FILE
            elif name == "workspace":
                source = "discovered"
            else:
                source = "default"
            if isinstance(value, SecretStr):
                value = _mask(value.get_secret_value())
            elif name == "database_url":
                value = mask_url(self.effective_database_url)
            elif (
                name in ("llm_base_url", "vespa_url", "notify_webhook_url", "telegram_api_url")
                and value
            ):
                value = mask_url(value)
            yield SettingRow(name, env_name, str(value), source, field.description or "")


@dataclass(frozen=True)
class SettingRow:
    name: str
    env: str
    value: str
    source: str
    help: str


def _mask(secret: str) -> str:
    if not secret:
        return ""
    return secret[:4] + "…" + "*" * 4 if len(secret) > 8 else "****"


def mask_url(url: str) -> str:
    """Hide a password in a database URL, keep the rest readable."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", file=str(path)) from exc


def load_settings(workspace: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Settings for a workspace (found as :func:`find_workspace` does)."""
    ws = find_workspace(workspace)
    _read_toml(ws / CONFIG_FILE)  # a broken amelio.toml is reported with its path
    try:
        return Settings(workspace=ws, **overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"Invalid settings ({ws / CONFIG_FILE} or AMELIO_*): {problems}") from exc

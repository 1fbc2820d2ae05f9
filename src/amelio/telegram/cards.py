"""Proposal cards in admin chats: what a proposal changes, and the buttons to decide.

A card shows the skill, the rationale, a diff summary and the benchmark badge, with
Approve, Reject, Diff and Run benchmark. The buttons call the library functions the
API calls (:func:`~amelio.improve.proposals.approve_proposal`, …), with the Telegram
user as the decision's author; a proposal already decided or gone stale answers
with the same reason as the API's 409, in the chat. Two admins pressing Approve at
once get one winner: the proposals module decides under a row lock.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any, Protocol

from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import TelegramError

from amelio.errors import AmelioError, Conflict
from amelio.improve.bench import latest_verdict, run_benchmark
from amelio.improve.proposals import (
    Proposal,
    approve_proposal,
    authorize_decision,
    get_proposal,
    may_decide,
    reject_proposal,
    review_flags,
)
from amelio.telegram import links
from amelio.telegram.client import author, call
from amelio.telegram.render import escape, render_parts
from amelio.workspace.folder import Workspace

if TYPE_CHECKING:
    from amelio.llm.base import Provider


class CardOwner(Protocol):
    """What a card's buttons need of the bot that sent it: its workspace, and the LLM
    that benchmarks a proposal (a protocol, so that cards need not import the bot)."""

    ws: Workspace
    provider: Provider | None


log = logging.getLogger(__name__)

__all__ = [
    "GLOBAL_ONLY",
    "badge",
    "card_buttons",
    "card_text",
    "edit_pressed",
    "on_proposal_button",
    "reject",
    "send_card",
]

#: Said on the card of a proposal that a project's admin chat may not decide.
GLOBAL_ONLY = (
    "Every project sees this skill: a global admin decides it (the API, the dashboard or the CLI)."
)
#: Rationale shown on a card; the whole text is one Diff press away.
MAX_RATIONALE = 600


def badge(verdict: dict[str, Any] | None) -> str:
    """The benchmark badge as plain text: the verdict, the gain and the pinned cases
    (checked, and regressed if any), or "not run"."""
    if not verdict:
        return "not run"
    mark = {"PASSED": "✅", "FAILED": "❌", "TIE": "➖"}.get(str(verdict["verdict"]), "•")
    gain = verdict.get("improvementPct")
    text = f"{mark} {verdict['verdict']}" + (f" ({gain:+.1f} %)" if gain is not None else "")
    checked, regressed = verdict.get("pinnedChecked", 0), verdict.get("pinnedRegressed", 0)
    if regressed:
        return f"{text} · {regressed} of {checked} pinned cases regressed"
    return f"{text} · {checked} pinned cases kept" if checked else text


def _diff_summary(proposal: Proposal) -> str:
    added = removed = 0
    for line in proposal.diff().splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    kind = {"new": "new skill", "global": "global skill", "project": "project skill"}
    what = (
        "triggers and keywords"
        if proposal.routing is not None
        else kind.get(proposal.scope, proposal.scope)
    )
    return f"{what}: +{added} −{removed} lines"


def _decides(proposal: Proposal) -> bool:
    """Whether the chats that see the card (the admin chats of the proposal's
    project) may approve or reject it."""
    return may_decide(proposal, role="admin", projects=(proposal.project,))


def card_text(proposal: Proposal, verdict: dict[str, Any] | None) -> str:
    """The card in MarkdownV2 (every value escaped: a skill or rationale can hold
    any character)."""
    rationale = " ".join(proposal.rationale.split())
    if len(rationale) > MAX_RATIONALE:
        rationale = rationale[: MAX_RATIONALE - 1] + "…"
    lines = [
        f"*Proposal \\#{proposal.id}* · skill *{escape(proposal.skill)}* · "
        f"project {escape(proposal.project)}",
        f"Rationale: {escape(rationale) or '—'}",
        f"Diff: {escape(_diff_summary(proposal))}",
        f"Benchmark: {escape(badge(verdict))}",
        f"Proposed by {escape(proposal.proposed_by)}",
        *(escape(flag) for flag in review_flags(proposal)),
    ]
    if proposal.status == "pending" and not _decides(proposal):
        lines.append(escape(GLOBAL_ONLY))
    if proposal.status != "pending":
        by = f" by {proposal.decided_by}" if proposal.decided_by else ""
        version = f" → v{proposal.result_version}" if proposal.result_version else ""
        lines.append(f"*{escape(proposal.status.capitalize() + by + version)}*")
    return "\n".join(lines)


def card_buttons(proposal: Proposal) -> InlineKeyboardMarkup | None:
    """Approve / Reject / Diff / Run benchmark while pending (without Approve and
    Reject where the project's admin chats may not decide); only Diff after."""
    diff = InlineKeyboardButton("Diff", callback_data=f"p:diff:{proposal.id}")
    if proposal.status != "pending":
        return InlineKeyboardMarkup([[diff]])
    tools = [diff]
    if proposal.scope != "new":  # a new skill has no old version to benchmark against
        tools.append(InlineKeyboardButton("Run benchmark", callback_data=f"p:bench:{proposal.id}"))
    if not _decides(proposal):
        return InlineKeyboardMarkup([tools])
    decide = [
        InlineKeyboardButton("✅ Approve", callback_data=f"p:approve:{proposal.id}"),
        InlineKeyboardButton("✖️ Reject", callback_data=f"p:reject:{proposal.id}"),
    ]
    if proposal.scope != "new":  # a canary needs an old version to fall back on
        decide.insert(1, InlineKeyboardButton("🐤 Canary", callback_data=f"p:canary:{proposal.id}"))
    return InlineKeyboardMarkup([decide, tools])


def _card(ws: Workspace, proposal_id: int) -> tuple[Proposal, dict[str, Any] | None]:
    return get_proposal(ws, proposal_id), latest_verdict(ws, proposal_id)


async def send_card(
    bot: Bot, chat_id: int, proposal: Proposal, verdict: dict[str, Any] | None
) -> None:
    await call(
        lambda: bot.send_message(
            chat_id,
            card_text(proposal, verdict),
            parse_mode=ParseMode.MARKDOWN_V2,
            reply_markup=card_buttons(proposal),
        )
    )


async def edit_pressed(update: Update, text: str, buttons: InlineKeyboardMarkup | None) -> None:
    """Show a decision on the card whose button was pressed (if it is still there):
    ``text`` in MarkdownV2, and the buttons left."""
    query = update.callback_query
    if query is None or query.message is None:
        return
    try:
        await call(
            lambda: query.edit_message_text(
                text, parse_mode=ParseMode.MARKDOWN_V2, reply_markup=buttons
            )
        )
    except TelegramError as exc:  # cosmetic: "not modified", a deleted message
        log.debug("telegram: card not refreshed: %s", exc)


async def _refresh(update: Update, proposal: Proposal, verdict: dict[str, Any] | None) -> None:
    await edit_pressed(update, card_text(proposal, verdict), card_buttons(proposal))


async def on_proposal_button(
    owner: CardOwner, update: Update, link: links.ChatLink, action: str, proposal_id: int
) -> None:
    query = update.callback_query
    assert query is not None
    ws = owner.ws
    try:
        proposal = await asyncio.to_thread(get_proposal, ws, proposal_id)
    except AmelioError as exc:
        refused = exc.message[:200]
        await call(lambda: query.answer(refused, show_alert=True))
        return
    if proposal.project != link.project:
        await call(
            lambda: query.answer("That proposal is not in this chat's project.", show_alert=True)
        )
        return
    bot = update.get_bot()
    chat_id = link.chat_id
    if action in ("approve", "canary", "reject"):
        try:
            authorize_decision(proposal, role=link.role, projects=(link.project,))
        except AmelioError as exc:
            refused = exc.message[:200]
            await call(lambda: query.answer(refused, show_alert=True))
            return
    if action in ("approve", "canary"):
        canary = ws.settings.rollout_canary_percent if action == "canary" else None
        try:
            done = await asyncio.to_thread(
                approve_proposal, ws, proposal_id, actor=author(query), canary=canary
            )
        except Conflict as exc:
            said = f"#{proposal_id}: {exc.message}"
            await call(lambda: query.answer("Not approved: see the chat."))
            await call(lambda: bot.send_message(chat_id, said))
            await _refresh(update, *await asyncio.to_thread(_card, ws, proposal_id))
            return
        said = f"Approved: {done.skill} v{done.result_version}" + (
            f" for {canary} % of conversations (amelio rollouts)" if canary else ""
        )
        await call(lambda: query.answer(said))
        await _refresh(update, done, await asyncio.to_thread(latest_verdict, ws, proposal_id))
    elif action == "reject":
        if proposal.status != "pending":
            await call(
                lambda: query.answer(
                    f"Proposal #{proposal_id} is already {proposal.status}.", show_alert=True
                )
            )
            return
        await call(lambda: query.answer())
        await call(
            lambda: bot.send_message(
                chat_id,
                f"Reject #{proposal_id} ({proposal.skill}): why? Reply to this message "
                "with the reason, or reply /skip to reject without one.",
                reply_markup=ForceReply(selective=True, input_field_placeholder="The reason"),
            )
        )
    elif action == "diff":
        await call(lambda: query.answer())
        diff = proposal.diff() or "(no change)"
        # A skill's own code fences are in its diff: the block's fence must be longer.
        fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", diff)), default=0) + 1)
        for part in render_parts(f"{fence}diff\n{diff}\n{fence}"):
            await call(
                lambda part=part: bot.send_message(  # type: ignore[misc]
                    chat_id, part, parse_mode=ParseMode.MARKDOWN_V2
                )
            )
    elif action == "bench":
        await call(lambda: query.answer("Benchmark started: the verdict arrives here."))
        try:
            # run_benchmark tells the notifiers, so the new card arrives by that path.
            await asyncio.to_thread(run_benchmark, ws, proposal_id, provider=owner.provider)
        except AmelioError as exc:
            failed = f"Benchmark of #{proposal_id}: {exc.message}"
            await call(lambda: bot.send_message(chat_id, failed))
    else:
        await call(lambda: query.answer("This button is not one of mine."))


async def reject(
    owner: CardOwner,
    update: Update,
    link: links.ChatLink,
    proposal_id: int,
    reason: str | None,
    author: str,
) -> None:
    """Reject with the reason an admin replied (or none, for /skip)."""
    ws = owner.ws
    bot = update.get_bot()
    try:
        proposal = await asyncio.to_thread(get_proposal, ws, proposal_id)
        if proposal.project != link.project:
            raise Conflict("That proposal is not in this chat's project.")
        authorize_decision(proposal, role=link.role, projects=(link.project,))
        done = await asyncio.to_thread(
            reject_proposal, ws, proposal_id, actor=author, reason=(reason or "").strip() or None
        )
    except AmelioError as exc:
        refused = f"#{proposal_id}: {exc.message}"
        await call(lambda: bot.send_message(link.chat_id, refused))
        return
    why = f": {done.decision_reason}" if done.decision_reason else ""
    await call(lambda: bot.send_message(link.chat_id, f"Rejected #{proposal_id}{why}"))

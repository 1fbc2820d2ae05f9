"""Learning cards in admin chats: a candidate, a supersede or a retire proposal,
with the correction that gave rise to it, and Approve, Edit and Reject.

A card arrives in the project's admin chats when a correction made in Telegram
waits for review, and ``/review`` sends one per waiting learning. The buttons call
:mod:`amelio.assistant.review`, as the API and the CLI do, with the Telegram user
as the reviewer; Edit asks for the new wording and approves it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

from telegram import Bot, ForceReply, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.constants import ParseMode
from telegram.error import TelegramError

from amelio.assistant import learnings as L
from amelio.assistant import review
from amelio.errors import AmelioError
from amelio.telegram import links
from amelio.telegram.cards import edit_pressed
from amelio.telegram.client import author, call
from amelio.telegram.render import escape

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = ["EDIT", "card_buttons", "card_text", "edit", "on_button", "send_cards"]

log = logging.getLogger(__name__)

#: The question Edit asks; the admin's reply to it carries the new wording.
EDIT = re.compile(r"Edit learning #(\d+):")
#: Cards one /review sends; the rest are counted.
MAX_CARDS = 10


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _context(ws: Workspace, item: L.Learning) -> dict[str, Any]:
    """The learning it would supersede and the interaction that taught it, by name
    for :func:`card_text`."""
    old, interaction = review.context(ws, item)
    return {"old": old, "interaction": interaction}


def card_text(item: L.Learning, context: dict[str, Any]) -> str:
    """The card in MarkdownV2 (every value escaped)."""
    lines = [
        f"*Learning \\#{item.id}* · skill *{escape(item.skill or 'all')}* · "
        f"project {escape(item.project)}",
        f"Rule: {escape(_short(item.rule, 600))}",
    ]
    if item.status == "active" and item.retire_proposal:
        proposal = item.retire_proposal
        figures = proposal.get("figures", {})
        lines.append(f"Retire proposal: {escape(str(proposal.get('reason')))}")
        lines.append(
            escape(
                f"answers with it: {figures.get('answersWith', 0)}, pass "
                f"{figures.get('passRateWith')}; without: {figures.get('answersWithout', 0)}, "
                f"pass {figures.get('passRateWithout')}"
            )
        )
    elif item.held_reason:
        lines.append(f"Waits: {escape(_short(item.held_reason, 300))}")
    old = context.get("old")
    if old is not None:
        lines.append(
            f"Would supersede \\#{old.id}: {escape(_short(old.rule, 300))} "
            f"\\({escape(old.provenance())}\\)"
        )
    interaction = context.get("interaction")
    if interaction is not None:
        said = escape(_short(interaction["message"], 200))
        answered = escape(_short(interaction["answer"], 300))
        lines.append(f"From answer \\#{interaction['interactionId']}: {said} → {answered}")
    lines.append(f"{escape(item.provenance().capitalize())}, status {escape(item.status)}")
    if item.reviewed_by and item.status != "candidate" and not item.retire_proposal:
        lines.append(f"*{escape(f'Reviewed by {item.reviewed_by}')}*")
    return "\n".join(lines)


def _waits(item: L.Learning) -> bool:
    return item.status == "candidate" or (
        item.status == "active" and (item.retire_proposal or {}).get("status") == "pending"
    )


def card_buttons(item: L.Learning) -> InlineKeyboardMarkup | None:
    """Approve / Edit / Reject while it waits (no Edit on a retire proposal)."""
    if not _waits(item):
        return None
    row = [InlineKeyboardButton("✅ Approve", callback_data=f"l:approve:{item.id}")]
    if item.status == "candidate":
        row.append(InlineKeyboardButton("✏️ Edit", callback_data=f"l:edit:{item.id}"))
    row.append(InlineKeyboardButton("✖️ Reject", callback_data=f"l:reject:{item.id}"))
    return InlineKeyboardMarkup([row])


async def _send(bot: Bot, ws: Workspace, chat_id: int, item: L.Learning) -> None:
    context = await asyncio.to_thread(_context, ws, item)
    await call(
        lambda: bot.send_message(
            chat_id,
            card_text(item, context),
            parse_mode=ParseMode.MARKDOWN_V2,
            reply_markup=card_buttons(item),
        )
    )


async def send_cards(bot: Bot, ws: Workspace, chat_id: int, items: list[L.Learning]) -> None:
    """One card per learning (at most :data:`MAX_CARDS`), then how many more wait."""
    for item in items[:MAX_CARDS]:
        await _send(bot, ws, chat_id, item)
    if len(items) > MAX_CARDS:
        more = f"… and {len(items) - MAX_CARDS} more: amelio learnings review, or the dashboard."
        await call(lambda: bot.send_message(chat_id, more))


async def tell_admins(bot: Bot, ws: Workspace, item: L.Learning) -> None:
    """Send the card of a learning that now waits to its project's admin chats."""
    chats = await asyncio.to_thread(links.admin_chats, ws, item.project)
    for chat in chats:
        try:
            await _send(bot, ws, chat.chat_id, item)
        except TelegramError as exc:
            log.warning("telegram: learning card to chat %s: %s", chat.chat_id, exc)


async def _refresh(update: Update, ws: Workspace, item: L.Learning) -> None:
    context = await asyncio.to_thread(_context, ws, item)
    await edit_pressed(update, card_text(item, context), card_buttons(item))


async def on_button(
    ws: Workspace, update: Update, link: links.ChatLink, action: str, learning_id: int
) -> None:
    query = update.callback_query
    assert query is not None
    bot = update.get_bot()
    try:
        if action == "approve":
            done = await asyncio.to_thread(
                review.approve_learning,
                ws,
                learning_id,
                actor=author(query),
                project=link.project,
            )
        elif action == "reject":
            done = await asyncio.to_thread(
                review.reject_learning, ws, learning_id, actor=author(query), project=link.project
            )
        elif action == "edit":
            item = await asyncio.to_thread(
                review.get_learning, ws, learning_id, project=link.project
            )
            await call(lambda: query.answer())
            await call(
                lambda: bot.send_message(
                    link.chat_id,
                    f"Edit learning #{learning_id}: reply with the new wording; it is "
                    f"approved as you write it.\nNow: {_short(item.rule, 300)}",
                    reply_markup=ForceReply(selective=True, input_field_placeholder="The rule"),
                )
            )
            return
        else:
            await call(lambda: query.answer("This button is not one of mine."))
            return
    except AmelioError as exc:
        refused = exc.message[:200]
        await call(lambda: query.answer(refused, show_alert=True))
        return
    await call(lambda: query.answer(f"Learning #{learning_id} is {done.status}."))
    await _refresh(update, ws, done)


async def edit(
    ws: Workspace, update: Update, link: links.ChatLink, learning_id: int, rule: str, who: str
) -> None:
    """Approve the wording an admin replied to Edit with."""
    bot = update.get_bot()
    try:
        done = await asyncio.to_thread(
            review.approve_learning, ws, learning_id, actor=who, project=link.project, rule=rule
        )
    except AmelioError as exc:
        refused = f"#{learning_id}: {exc.message}"
        await call(lambda: bot.send_message(link.chat_id, refused))
        return
    said = f"Learning #{learning_id} is {done.status}: {done.rule}"
    await call(lambda: bot.send_message(link.chat_id, said))

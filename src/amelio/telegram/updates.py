"""Each Telegram update acts once, however often it arrives.

Telegram delivers an update again when it did not hear that the last delivery
arrived: a webhook answer lost on the way back, a poller stopped (or killed) before
its next ``getUpdates`` confirmed what it had fetched. Someone holding a captured
update and the webhook's secret can also send it again. A replayed Approve, vote or
message must not act a second time, so the bot claims each update id before any
handler sees it: one conditional INSERT in the database, which every process
shares and which outlives a restart. Whether the update came by webhook or by
polling makes no difference: both feed the same application.

The claim comes before the work, so an update whose handling a crash cut short is
not handled again either: at most once, as for a button pressed once.
"""

from __future__ import annotations

from datetime import timedelta

from amelio import db
from amelio.db.schema import telegram_updates, utcnow
from amelio.workspace.folder import Workspace

__all__ = ["RETENTION", "claim_update"]

#: How long an update id is remembered. Telegram keeps an undelivered update for a
#: day; after a week without updates, a bot's next id is random rather than the next.
RETENTION = timedelta(days=7)
#: Old ids are swept on one claim in this many (update ids are consecutive), so
#: sweeping costs the busy path nothing most of the time.
SWEEP_EVERY = 256


def claim_update(ws: Workspace, bot_id: int, update_id: int) -> bool:
    """True the first time ``bot_id``'s update ``update_id`` is claimed, then False,
    in every process and after a restart."""
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        if update_id % SWEEP_EVERY == 0:
            conn.execute(
                telegram_updates.delete().where(telegram_updates.c.received_at < now - RETENTION)
            )
        claimed = db.insert_ignore(
            conn,
            telegram_updates,
            {"bot_id": bot_id, "update_id": update_id, "received_at": now},
            ["bot_id", "update_id"],
            returning=telegram_updates.c.update_id,
        )
    return bool(claimed)

"""The Telegram front door: the bot (`amelio telegram run`), chat links and invites, and the
admin notifier."""

"""Operating a workspace: the schedule, metrics, tracing, logs, export and import,
backup and restore. Each is imported from its own module, so that a command that
only logs does not load the backup machinery."""

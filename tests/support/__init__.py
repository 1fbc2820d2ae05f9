"""The repository's own test plumbing: processes, databases, start-up probes."""

"""Search engines: the registry and the built-in engines (tantivy, FTS5, Vespa)."""

"""SQL over the EHR with sqlglot: validation against the schema, safe slot rendering, complexity, dialects."""

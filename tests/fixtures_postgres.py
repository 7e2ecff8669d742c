"""PostgreSQL fixtures (filled in with the PostgreSQL store)."""

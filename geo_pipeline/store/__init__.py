"""PostgreSQL access: connections, named queries (SQL text lives in sql/queries/), migrations."""

"""Finding or starting the real parts: PostgreSQL, Redis, object storage (DESIGN.md section 6)."""

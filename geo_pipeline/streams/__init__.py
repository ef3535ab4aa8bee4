"""Redis Streams: key names, the outbox relay, consumer groups, reclaim, dead letters and the
shared rate limiters. Redis carries hints; PostgreSQL stays the truth (docs/design.md section 4)."""

"""What every process shares below the parts: finding or starting the real services (PostgreSQL,
Redis, object storage; docs/design.md section 6) and the named crash points the fault suite kills
processes at (the relay and the worker both have some); ``preflight``: PostgreSQL migrated and
Redis answering, checked before any side effect.
"""

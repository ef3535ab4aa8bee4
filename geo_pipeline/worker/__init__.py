"""The asyncio execution loop (claim, submit, poll, evidence, fenced completion), the sweeper
that re-derives due work from PostgreSQL, and the named crash points of the fault tests."""

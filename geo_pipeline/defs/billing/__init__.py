"""Billing: a run's reconciliation of our ledger against the platforms' fee statements (R23,
R24), partitioned by run, with its checks."""

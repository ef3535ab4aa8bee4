"""Billing: quote snapshots, the append-only ledger, reconciliation against fee statements."""

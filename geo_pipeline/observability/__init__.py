"""Metrics (Prometheus) and structured JSON logs (R26, D6, D11)."""

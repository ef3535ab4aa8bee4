"""The metrics of R26 / D11, defined once so every process exports the same names.

Workers, the relay and the sweeper call ``serve(port)`` to expose ``/metrics`` and ``/healthz``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from geo_pipeline.settings import settings

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

QUEUE_WAIT = Histogram(
    "geo_queue_wait_seconds",
    "Time from outbox insert to a worker starting on the sample",
    ["platform"],
    buckets=_LATENCY,
)
ACCEPT_LATENCY = Histogram(
    "geo_upstream_accept_seconds",
    "Time from sending a submit to the upstream acceptance",
    ["platform"],
    buckets=_LATENCY,
)
EXECUTION_TIME = Histogram(
    "geo_execution_seconds",
    "Time from claim to the fenced completion of an attempt",
    ["platform"],
    buckets=_LATENCY,
)
PENDING_ENTRIES = Gauge(
    "geo_stream_pending_entries",
    "Delivered but unacknowledged entries per stream and group",
    ["stream"],
)
STREAM_LENGTH = Gauge("geo_stream_length", "Entries in each stream", ["stream"])
UNCERTAIN = Gauge("geo_uncertain_samples", "Samples whose upstream acceptance is unknown")
DEAD_LETTERS = Counter(
    "geo_dead_letters_total", "Messages moved to the dead-letter stream", ["stream"]
)
EVIDENCE_MISSING_RATE = Gauge(
    "geo_evidence_missing_rate", "Share of completed samples whose evidence is partial or failed"
)
RECONCILIATION_DIFF = Gauge(
    "geo_reconciliation_difference_minor",
    "Unexplained difference between our charges and fee statements: the sum of |theirs - ours|"
    " over the lines domain.billing.EXPLAINED leaves unexplained (opposite signs never cancel)",
    ["currency"],
)
# The sample backlog in PostgreSQL (the truth), not stream lag: hints are acknowledged on first
# read, so a stream can be empty while thousands of samples wait. KEDA scales workers on this.
BACKLOG = Gauge(
    "geo_backlog_samples",
    "Samples per platform and state: queued (due now), running, uncertain, dead_letter (open)",
    ["platform", "state"],
)
OLDEST_QUEUED_AGE = Gauge(
    "geo_oldest_queued_age_seconds",
    "How long the longest-waiting due sample of each platform has waited",
    ["platform"],
)
DB_WRITE_LATENCY = Histogram(
    "geo_db_write_seconds", "Latency of database write transactions", ["op"], buckets=_LATENCY
)
RETRIES = Counter(
    "geo_retries_total", "Retries scheduled, by error class", ["platform", "error_class"]
)
PROCESSED = Counter(
    "geo_samples_processed_total", "Attempts finished, by outcome", ["platform", "outcome"]
)
STALE_WRITES = Counter(
    "geo_stale_token_writes_total", "Writes rejected because the fencing token was stale", ["op"]
)
OUTBOX_PUBLISHED = Counter(
    "geo_outbox_published_total", "Outbox rows published to streams", ["stream"]
)
IN_FLIGHT = Gauge("geo_samples_in_flight", "Samples a worker holds right now")


def serve(port: int, addr: str | None = None) -> int:
    """Expose /metrics and /healthz (geo_pipeline.observability.health) on a background thread;
    returns the bound port (port 0: one the kernel picks). The address defaults to
    ``GEO_METRICS_ADDR`` or 127.0.0.1 (containers set 0.0.0.0)."""

    from geo_pipeline.observability.health import start_server

    return int(start_server(port, addr or settings().metrics_addr).server_port)

"""What a worker process is told: its platforms, lease, batching, bounds and recovery knobs."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from geo_pipeline.domain.retry import PollSchedule, RetryPolicy

# An uncertain sample of a platform without lookup or safe re-sends waits for an operator (R12).
UNCERTAIN_PARK_S = 7 * 24 * 3600.0


def default_worker_id() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerSettings:
    platforms: Sequence[str]
    worker_id: str = field(default_factory=default_worker_id)
    lease_s: float = 30.0
    renew_every_s: float | None = None  # default lease / 3
    claim_batch: int = 200
    max_in_flight: int = 5000  # per lane (platform): a slow platform never eats another's room
    block_ms: int = 1000
    idle_claim_s: float = 1.0  # an idle lane still asks PostgreSQL this often (sweeper backup)
    reclaim_idle_ms: int = 30_000
    reclaim_every_s: float = 5.0
    max_deliveries: int = 5
    flush_s: float = 0.005  # batching window for completion writes
    # On platforms that can look a request up by its idempotency key, an upstream acceptance
    # is written within this window, or with the attempt's end if that comes first (one write
    # instead of two). A crash inside the window leaves the acceptance record at 'sending' and
    # recovery looks the request up (R9, R12). Platforms without lookup get flush_s: there an
    # unrecorded acceptance would need an operator.
    accept_defer_s: float = 1.0
    batch_max: int = 500
    finish_concurrency: int = 2  # completion batches in flight (evidence inserts overlap)
    aging_s: float = 60.0
    poll: PollSchedule = field(default_factory=PollSchedule)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    drain_timeout_s: float = 10.0
    db_pool_size: int = 6
    lookup_tries: int = 3
    # Upstream calls in flight per platform: waiting happens here, not inside the HTTP client's
    # connection pool (whose pool timeout would turn a long queue into false transient errors).
    max_concurrent_calls: int = 64
    screenshot_retry_s: float = 2.0  # a pending screenshot is asked for again after this
    # Claim no more new submissions than the platform's submit rate admits in this many
    # seconds: a sample claimed but waiting for a rate-limit token holds its place, so a large
    # tenant's backlog would queue here in arrival order and the fair choice made in
    # PostgreSQL would be lost (R10).
    submit_horizon_s: float = 0.5
    # The longest one request can be in flight before the connector gives up on it. With the
    # lease it makes the quiet period after which a key lookup's "not found" is believed: no
    # request sent before then can still land (docs/design.md section 8).
    submit_timeout_s: float = 120.0
    # Re-sends under the same key after an unknown outcome, on platforms with idempotency keys.
    resend_tries: int = 3
    # An unexpected (non-connector) error hands the sample back after worker_error_delay_s,
    # doubling each time; after max_worker_errors the sample fails with the error's summary and
    # a dead letter names it for an operator. Default bound: 5 + 10 + 20 + 40 s, then failed.
    worker_error_delay_s: float = 5.0
    max_worker_errors: int = 5
    # Each platform's base URL: a lane claims once its platform answers, or after
    # platform_wait_s (worker/platform_wait.py). Empty (tests, stand-ins): no waiting.
    platform_urls: Mapping[str, str] = field(default_factory=dict)
    platform_wait_s: float = 30.0
    # Platforms whose service calls us back on completion (a receiver URL configured: cloro's
    # webhook, DataForSEO's pingback, Bright Data's notify) are polled only this often, as a
    # safety net: the callback wakes the fetch (worker/callbacks.py). GEO_CALLBACK_POLL_S.
    callback_poll_s: float = 60.0

    @property
    def quiet_s(self) -> float:
        """After this long since its last send, no request of an attempt can still land."""
        return self.submit_timeout_s + self.lease_s

    @property
    def lease_margin_s(self) -> float:
        """Self-fencing: a worker sends only while its lease has at least this much left."""
        return min(2.0, self.lease_s * 0.2)

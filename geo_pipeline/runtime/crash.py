"""Named crash points for the fault tests (R25).

``crashpoint("after_claim_before_submit")`` kills the current process with SIGKILL when the
environment says ``GEO_CRASH_AT=after_claim_before_submit`` (and, with ``GEO_CRASH_AFTER=N``,
only on the N-th hit). SIGKILL, not an exception: nothing gets to clean up, exactly like a
power cut, so the tests prove recovery from PostgreSQL alone.
"""

from __future__ import annotations

import os
import signal
import sys

from geo_pipeline.settings import settings

CRASH_AT_ENV = "GEO_CRASH_AT"
CRASH_AFTER_ENV = "GEO_CRASH_AFTER"

# The points the fault suite exercises; code may only name these.
POINTS = frozenset(
    {
        "after_commit_before_publish",  # relay: outbox rows read, nothing published yet
        "after_publish_before_mark",  # relay: XADD done, published_at not written
        "after_read_before_claim",  # worker: entries delivered, nothing claimed
        "after_claim_before_submit",  # worker: lease + acceptance record committed
        "accepted_not_recorded",  # worker: upstream accepted, acceptance not written
        "stored_not_completed",  # worker: evidence archived, completion not committed
        "completed_not_acked",  # worker: completion committed, entries not acked
        "browser_sent_not_answered",  # browser lane: the app is answering, nothing captured yet
    }
)

_hits: dict[str, int] = {}
# Read once: a process is started with its crash point (the hot path calls this per sample).
_TARGET = settings().crash_at


def crashpoint(name: str) -> None:
    """SIGKILL this process if ``GEO_CRASH_AT`` names this point (after N hits if asked)."""
    if _TARGET is None or _TARGET != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    after = settings().crash_after
    if _hits[name] >= after:
        sys.stderr.write(f"crashpoint {name}: SIGKILL pid {os.getpid()}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

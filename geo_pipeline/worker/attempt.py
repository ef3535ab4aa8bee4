"""One claimed sample, start to end: send (or recover) -> poll -> fetch -> archive -> the fenced
end-of-attempt write -> XACK (R9-R15, R25).

The database fences every write; this module fences what leaves the process
(docs/operations.md, "Recovery bounds"):
- **Self-fence before sending.** Every external call is made only while the local lease deadline
  is in the future, and a send is first marked in PostgreSQL under the token (``mark_sent``): a
  worker that lost its sample sends nothing.
- **Same key, not a new one.** After an unknown outcome the request is re-sent under the same
  idempotency key where the platform takes keys; a new attempt (new key) comes only after a
  definite rejection, or after a lookup's "not found" has held for longer than any request can
  live (``WorkerSettings.quiet_s``) since the recorded send.
- **Write-ahead what was paid for.** A synchronous answer is archived the moment it arrives;
  recovery completes from it instead of asking (and paying) again.
- **Never forget an upstream id.** A failed acceptance write is folded into the attempt's last
  write; a failed last write is retried while the lease holds, then logged with the id.
- **Bounded recovery.** An unexpected error hands the sample back with a growing delay, and after
  ``max_worker_errors`` ends it failed with the error's summary and a dead letter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import (
    Acceptance,
    ConnectorError,
    Evidence,
    SubmitRequest,
    TransientError,
)
from geo_pipeline.domain.retry import ErrorFacts, RetryPolicy, classify, poll_interval
from geo_pipeline.evidence.archive import ArchiveError
from geo_pipeline.evidence.write_ahead import HeldResponse, get_response, put_response
from geo_pipeline.flows import complete as completion
from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import ACCEPT_LATENCY, EXECUTION_TIME, PROCESSED, RETRIES
from geo_pipeline.runtime.crash import crashpoint
from geo_pipeline.store import execution as ex
from geo_pipeline.store.webhooks import task_for_key as webhook_task_for_key
from geo_pipeline.worker.callbacks import wake_key
from geo_pipeline.worker.context import Context
from geo_pipeline.worker.evidence_bridge import (
    archive_for_completion,
    sample_ref,
    with_store_retry,
)
from geo_pipeline.worker.lane import Lane
from geo_pipeline.worker.leases import Held, LeaseLost
from geo_pipeline.worker.settings import UNCERTAIN_PARK_S
from geo_pipeline.worker.waits import waiting

log = logging.getLogger("geo_pipeline.worker")


class TimedOut(TransientError):
    """An accepted task still collecting past the retry policy's total bound (R13)."""


# Outcomes of a re-send that say the platform did not take the request (so the key is free).
DEFINITE_REJECTIONS = ("invalid_params", "no_permission")


class Attempt:
    def __init__(self, ctx: Context, lane: Lane, h: Held) -> None:
        self.c = ctx
        self.lane = lane
        self.h = h
        self.req = request_for(lane, h.row)

    # ------------------------------------------------------------------ the task
    async def run(self) -> None:
        h = self.h  # a local named h: tools (and tests) find the sample a task works on
        try:
            await self.execute()
        except asyncio.CancelledError:
            if self.c.stopping.is_set() and not h.lost:
                raise  # the drain hands it back
            self.lane.release(h)
        except LeaseLost:
            await self.let_go()
        except Exception as exc:
            await self.unexpected(exc)
        finally:
            self.lane.submit_started(h)
            if h.lost:
                self.lane.release(h)
            self.lane.sample_done()

    async def execute(self) -> None:
        h, row = self.h, self.h.row
        upstream_id: str | None = row.get("upstream_id")
        accepted_age = float(row.get("accepted_age_s") or 0.0)
        inline = False
        if row["submission_state"] in ("submitting", "uncertain"):
            req_state = row.get("req_state") or "prepared"
            never_sent = row["was"] == "planned" or req_state == "prepared"
            if never_sent:
                if h.cancelled:
                    await self.end(self.abandon("CANCELLED", fail=True))
                    return
                if row["was"] == "planned":
                    crashpoint("after_claim_before_submit")
                acc = await self.submit()
            else:
                acc = await self.recover()
            if acc is None:
                return
            upstream_id = acc.upstream_id
            inline = acc.inline_result is not None
            accepted_age = 0.0
        if upstream_id is None:  # accepted without an id cannot happen (schema CHECK)
            raise RuntimeError(f"sample {h.sample_id} is accepted without an upstream id")
        h.upstream_id = upstream_id
        await self.follow(upstream_id, accepted_age, inline)

    # ------------------------------------------------------------------ sending
    async def send(self) -> Acceptance:
        """The one place a request leaves: self-fenced, marked sent under the token."""
        h, lane = self.h, self.lane
        h.fence()
        if not await self.c.sends.submit((h.sample_id, h.token)):
            h.lost = True  # the token moved on: another worker holds the sample
            raise LeaseLost(f"sample {h.sample_id}: token {h.token} is no longer current")
        async with lane.calls:
            h.fence()  # the call budget may have made us wait
            return await lane.connector.submit(self.req)

    async def submit(self) -> Acceptance | None:
        lane = self.lane
        await lane.acquire_submit(self.h)
        lane.submit_started(self.h)
        t0 = time.monotonic()
        try:
            acc = await self.send()
        except ConnectorError as exc:
            if exc.error_class == "acceptance_unknown":
                return await self.after_unknown()
            if exc.error_class == "already_accepted":
                return await self.held_upstream()
            await self.submit_failed(exc)
            return None
        crashpoint("accepted_not_recorded")
        ACCEPT_LATENCY.labels(lane.platform).observe(time.monotonic() - t0)
        await self.accepted(acc, "response")
        return acc

    async def accepted(self, acc: Acceptance, resolved_by: str) -> None:
        """Upstream has the task: archive a paid inline answer first, then queue the record.
        Queued, not awaited: polling may start at once; ``end`` folds a still-queued acceptance
        into the attempt's last write, or waits for it."""
        h = self.h
        if acc.inline_result is not None and resolved_by != "write_ahead":
            await self.write_ahead(acc)
        rec = ex.AcceptanceRecord(h.sample_id, h.token, acc.upstream_id, resolved_by)
        h.accept_rec = rec
        h.upstream_id = acc.upstream_id
        # Acceptances wait up to accept_defer_s where the platform can look a request up (a
        # crash then costs a lookup); elsewhere they are written within flush_s.
        batcher = self.c.accepts_deferred if self.lane.caps.lookup_by_key else self.c.accepts
        h.accept = batcher.submit(rec)

    async def write_ahead(self, acc: Acceptance) -> None:
        if self.c.archive is None or acc.inline_result is None:
            return  # the bare core's benchmarks keep no evidence at all
        held = HeldResponse(acc.upstream_id, acc.inline_result, "application/json")
        ref, attempt_no = sample_ref(self.h.row), self.req.attempt_no

        async def put() -> str:
            return await asyncio.to_thread(put_response, self.c.archive, ref, attempt_no, held)

        try:
            await with_store_retry("write-ahead copy", self.h.sample_id, put)
        except ArchiveError as exc:
            # The store stayed away: raising now would drop the answer for certain, so it goes
            # on from memory (the completion archives it again) and only a crash before that
            # costs it. Said loudly, with the task's id.
            log.warning(
                "write-ahead copy of %s (upstream %s) failed: %s; continuing from memory",
                self.h.sample_id,
                acc.upstream_id,
                exc,
            )

    def adopt_archived(self, upstream_id: str | None = None) -> Acceptance | None:
        """A paid answer this attempt's earlier worker archived, handed to the connector."""
        adopt = getattr(self.lane.connector, "adopt_inline_result", None)
        if self.c.archive is None or adopt is None:
            return None
        held = get_response(self.c.archive, sample_ref(self.h.row), self.req.attempt_no)
        if held is None or (upstream_id is not None and held.upstream_id != upstream_id):
            return None
        adopt(held.upstream_id, held.raw, held.mime_type)
        return Acceptance(held.upstream_id, inline_result=held.raw)

    # ------------------------------------------------------------------ unknown outcomes (R12)
    async def after_unknown(self) -> Acceptance | None:
        """Our own send timed out: the platform may have the task."""
        caps = self.lane.caps
        if caps.idempotency_keys:
            return await self.resend()
        if caps.lookup_by_key:
            try:
                found = await self.lookup()
            except ConnectorError as exc:
                # A look-up that cannot answer proves nothing: uncertain, never a re-send.
                await self.park_uncertain(
                    f"acceptance_unknown:lookup_failed:{exc.error_class}", self.c.s.quiet_s
                )
                return None
            if found is not None:
                await self.accepted(found, "lookup")
                return found
            # Right after the send a "not found" proves nothing: look again after the quiet
            # period, counted from the send.
            await self.park_uncertain("acceptance_unknown:lookup_pending", self.c.s.quiet_s)
            return None
        await self.park_uncertain("acceptance_unknown:no_lookup", UNCERTAIN_PARK_S)
        return None

    async def resend(self, tries: int | None = None) -> Acceptance | None:
        """Re-send under the SAME key (same attempt): the platform returns the task it has, or
        takes the request now; it can never create a second task."""
        n = self.c.s.resend_tries if tries is None else tries
        last: ConnectorError | None = None
        for i in range(n):
            if i or tries is None:
                await asyncio.sleep(random.uniform(0.5, 1.0) * min(2.0, 0.2 * 2**i))
            await self.lane.acquire_submit(self.h)
            self.lane.submit_started(self.h)
            try:
                acc = await self.send()
            except ConnectorError as exc:
                if exc.error_class == "already_accepted":
                    return await self.held_upstream()
                if exc.error_class in DEFINITE_REJECTIONS:
                    if self.lane.caps.lookup_by_key:
                        # A rejection of the RE-send says nothing certain about the first send,
                        # which may have been taken (not every platform replays a known key
                        # before validating): the lookup decides once the quiet period passed.
                        await self.park_uncertain(
                            f"acceptance_unknown:resend_{exc.error_class}", self.c.s.quiet_s
                        )
                        return None
                    await self.submit_failed(exc)
                    return None
                last = exc
                continue
            self.c.report["resent"] += 1
            await self.accepted(acc, "resend")
            return acc
        what = last.error_class if last else "unknown"
        elapsed = float(self.h.row.get("elapsed_s") or 0.0) + time.monotonic() - self.h.claimed_at
        if elapsed > self.policy().max_total_s:
            # The platform stayed unreachable past the retry policy's total bound: an operator
            # decides (the key is on the record; `samples resolve`).
            await self.park_uncertain("acceptance_unknown:resend_budget_spent", UNCERTAIN_PARK_S)
            return None
        # Still unknown: the sample stays claimable (its platform is recoverable) and the next
        # claim re-sends under the same key again.
        await self.park_uncertain(f"acceptance_unknown:resend_{what}", self.c.s.retry.max_delay_s)
        return None

    async def held_upstream(self) -> Acceptance | None:
        """The platform says it holds a task under this attempt's key but not which (cloro's
        409): accepted, id unknown (R12). A new key would pay twice. If the service's callback
        already named the task for this key (``geo.webhook_deliveries``), follow it; otherwise
        the sample waits for the id (a later callback, an operator: `samples resolve`)."""
        entry = getattr(self.lane.connector, "entry", None)
        task_id = None
        if entry is not None and self.c.pool is not None:
            task_id = await self.c.db(
                webhook_task_for_key, entry.protocol, self.req.idempotency_key
            )
        if task_id is not None:
            acc = Acceptance(upstream_id=task_id)
            await self.accepted(acc, "webhook")
            return acc
        await self.park_uncertain("accepted_upstream:id_unknown", UNCERTAIN_PARK_S)
        if entry is not None and self.c.pool is not None:
            # The callback may have landed between our read and the park: the receiver then
            # saw no uncertain sample and settled nothing, and no later delivery need come.
            # Read again now the park is committed (the receiver records before it looks): one
            # of the two always sees the other, and the guarded transition settles it once.
            task_id = await self.c.db(
                webhook_task_for_key, entry.protocol, self.req.idempotency_key
            )
            if task_id is not None:
                try:
                    await self.c.db(
                        ex.resolve_uncertain,
                        self.h.sample_id,
                        accepted_upstream_id=task_id,
                        note=f"callback recorded before the park: task {task_id}",
                        actor="webhook",
                    )
                except ex.NotUncertain:
                    pass  # the receiver (or an operator) settled it first
        return None

    async def recover(self) -> Acceptance | None:
        """A take-over of an attempt whose request may have left (its record says 'sending' or
        'uncertain'): find what the platform has before anything else."""
        caps, row = self.lane.caps, self.h.row
        if not caps.asynchronous:
            archived = await asyncio.to_thread(self.adopt_archived)
            if archived is not None:
                await self.accepted(archived, "write_ahead")
                return archived
        if caps.lookup_by_key:
            try:
                found = await self.lookup()
            except ConnectorError as exc:
                # Look again when the platform says it can answer (e.g. a browser account's
                # lease held by a dead worker runs out then), else after the longest backoff.
                retry_s = self.c.s.retry.max_delay_s
                if exc.retry_after_s is not None:
                    retry_s = min(retry_s, max(0.5, exc.retry_after_s))
                await self.park_uncertain(f"lookup failed: {exc.error_class}", retry_s)
                return None
            except NotImplementedError:
                found = None
            if found is not None:
                await self.accepted(found, "lookup")
                return found
            if float(row.get("sent_age_s") or 0.0) >= self.c.s.quiet_s:
                # "Not found" long after the last send: no request of this attempt can still
                # land, so a new attempt (a new key) is safe.
                await self.end(self.abandon("lookup:absent", fail=self.h.cancelled))
                return None
        if caps.idempotency_keys:
            return await self.resend(tries=1)
        if caps.lookup_by_key:
            age = float(row.get("sent_age_s") or 0.0)
            await self.park_uncertain("lookup:absent_not_yet_trusted", self.c.s.quiet_s - age + 0.5)
            return None
        await self.park_uncertain("acceptance_unknown:no_lookup", UNCERTAIN_PARK_S)
        return None

    async def lookup(self) -> Acceptance | None:
        """Ask the platform for the task by idempotency key, a few times; None = not found."""
        key, lane = self.req.idempotency_key, self.lane
        last: ConnectorError | None = None
        for i in range(self.c.s.lookup_tries):
            await self.c.db(ex.note_lookup, key)
            try:
                await lane.poll_limit.acquire()
                async with lane.calls:
                    self.h.fence()
                    return await lane.connector.lookup(key)
            except ConnectorError as exc:
                last = exc
                await asyncio.sleep(min(2.0, 0.2 * (2**i)))
        assert last is not None
        raise last

    def abandon(self, reason: str, *, fail: bool) -> completion.Finish:
        """The attempt was never accepted upstream: close it; retry now or fail."""
        return completion.Finish(
            self.h.sample_id,
            self.h.token,
            "failed" if fail else "queued",
            sub_to="planned",
            reason=reason,
            outcome="cancelled" if reason == "CANCELLED" else "not_accepted",
            req_state="not_accepted",
        )

    async def park_uncertain(self, reason: str, delay_s: float) -> None:
        self.c.report["uncertain"] += 1
        await self.end(
            completion.Finish(
                self.h.sample_id,
                self.h.token,
                "queued",
                sub_to="uncertain",
                reason=reason,
                delay_s=delay_s,
                outcome="uncertain",
                req_state="uncertain",
            )
        )

    async def submit_failed(self, exc: ConnectorError) -> None:
        h, row = self.h, self.h.row
        d = classify(
            ErrorFacts(
                exc.error_class,
                "submit",
                int(row["attempt_no"]),
                int(row.get("rate_limited") or 0),
                float(row.get("elapsed_s") or 0.0) + (time.monotonic() - h.claimed_at),
                exc.retry_after_s,
                waited_so_far=int(row.get("waited") or 0),
                cause=getattr(exc, "cause", None),
                layout_waits=int(row.get("layout_waits") or 0),
            ),
            self.policy(),
        )
        fail = d.action != "retry" or h.cancelled
        if not fail:
            RETRIES.labels(self.lane.platform, exc.error_class).inc()
        if exc.error_class == "unavailable":
            waiting(self.lane.platform, h.sample_id, d.reason, d.delay_s, exc)
        await self.end(
            completion.Finish(
                h.sample_id,
                h.token,
                "failed" if fail else "queued",
                sub_to="planned",
                reason="CANCELLED" if h.cancelled else (d.reason or exc.error_class),
                delay_s=d.delay_s,
                outcome="not_accepted",
                error_class=exc.error_class,
                error_detail=str(exc)[:300],
                retry_after_ms=int(exc.retry_after_s * 1000) if exc.retry_after_s else None,
                req_state="not_accepted",
            )
        )

    # ------------------------------------------------------------------ following the task
    async def follow(self, upstream_id: str, accepted_age: float, inline: bool) -> None:
        """Poll the accepted task until it ends (interval grows with its age, R14), fetch the
        evidence, archive it, and write the completion."""
        h, lane, s = self.h, self.lane, self.c.s
        if not inline and not lane.caps.asynchronous:
            # A synchronous answer this worker does not hold: the one archived on arrival.
            inline = await asyncio.to_thread(self.adopt_archived, upstream_id) is not None
        started = time.monotonic() - accepted_age
        poll_errors = 0
        state = "completed" if inline else "pending"
        failed_credits: int | None = None
        first = True
        while state not in ("completed", "failed"):
            age = time.monotonic() - started
            if lane.callbacks_on:
                # The service's callback wakes the poll; the safety net polls without it.
                await self.c.wakes.wait(wake_key(lane.protocol, upstream_id), s.callback_poll_s)
            else:
                await asyncio.sleep(s.poll.first_s if first else poll_interval(age, s.poll))
            first = False
            await lane.poll_limit.acquire()
            try:
                async with lane.calls:
                    h.fence()
                    pr = await lane.connector.poll(upstream_id)
                state = pr.state
                failed_credits = pr.vendor_credits
                poll_errors = 0
                if state not in ("completed", "failed") and self.overdue(started):
                    # Still collecting past the total bound, on a platform where one task can
                    # be stopped: give up and cancel it (it would hold a concurrency slot and
                    # could still bill). Elsewhere the task runs on and is followed: it will be
                    # billed whether we wait or not (cloro), so giving up would lose a paid
                    # result.
                    await self.fail_accepted(
                        TimedOut(f"{lane.platform} task {upstream_id} still {state}"),
                        "poll:timed_out",
                    )
                    return
            except ConnectorError as exc:
                poll_errors += 1
                d = classify(
                    ErrorFacts(
                        exc.error_class,
                        "poll",
                        int(h.row["attempt_no"]),
                        poll_errors=poll_errors,
                        retry_after_s=exc.retry_after_s,
                    ),
                    self.policy(),
                )
                if d.action == "poll_again":
                    await asyncio.sleep(d.delay_s)
                    continue
                accepted_for = time.monotonic() - started
                if exc.error_class != "not_found" and accepted_for < self.policy().max_total_s:
                    # A run of failed polls is an outage (ours or the platform's), not a failed
                    # task: the task may well finish and be billed. Keep the id and follow it
                    # again later; only the total bound since acceptance ends it.
                    await self.end(
                        completion.Finish(
                            h.sample_id,
                            h.token,
                            "queued",
                            reason=f"poll:{exc.error_class}:deferred",
                            delay_s=s.retry.max_delay_s,
                            error_detail=str(exc)[:300],
                        )
                    )
                    return
                await self.fail_accepted(exc, self.gone_reason(exc, started) or d.reason)
                return
        if state == "failed":
            await self.upstream_failed(upstream_id, credits=failed_credits)
            return
        try:
            await lane.poll_limit.acquire()
            async with lane.calls:
                h.fence()
                evidence = await lane.connector.fetch_evidence(upstream_id, self.req)
        except ConnectorError as exc:
            if exc.error_class == "unparseable":
                # Keep the raw bytes, send to review, never re-ask (R13).
                await self.complete(upstream_id, None, unparseable=exc)
                return
            gone = self.gone_reason(exc, started)
            if gone is not None:
                await self.fail_accepted(exc, gone)
                return
            if time.monotonic() - started > self.policy().max_total_s:
                # Accepted long ago and the result still cannot be fetched: R13's total bound.
                await self.fail_accepted(exc, f"fetch:{exc.error_class}:budget_exhausted")
                return
            await self.end(
                completion.Finish(
                    h.sample_id,
                    h.token,
                    "queued",
                    reason=f"fetch:{exc.error_class}",
                    delay_s=max(1.0, exc.retry_after_s or 0.0),
                    error_detail=str(exc)[:300],
                )
            )
            return
        if evidence.collection_state == "failed":
            await self.upstream_failed(upstream_id, evidence)
            return
        await self.complete(upstream_id, evidence)

    async def fail_accepted(self, exc: ConnectorError, reason: str | None) -> None:
        """An accepted task we cannot follow any further: fail it with the upstream id kept on
        the sample and no charge we cannot prove; reconciliation will see the platform's line
        and an operator can follow up (R13, R23)."""
        await self.release_upstream(self.h.upstream_id or self.h.row.get("upstream_id"))
        await self.end(
            completion.Finish(
                self.h.sample_id,
                self.h.token,
                "failed",
                reason=reason,
                outcome="failed",
                error_class=exc.error_class,
                error_detail=str(exc)[:300],
            )
        )

    def gone_reason(self, exc: ConnectorError, started: float) -> str | None:
        """A platform that keeps results for a stated time (``result_retention_s``: cloro 24 h,
        DataForSEO and Bright Data 30 days) answering "not found" for an accepted task: the
        result is gone upstream (expired, or never kept), whatever we do next. The sample ends
        in a state that says so -- never a silent loss, never polled on (issue 31)."""
        retention = self.lane.caps.result_retention_s
        if exc.error_class != "not_found" or retention is None:
            return None
        age = int(time.monotonic() - started)
        log.warning(
            "result gone upstream",
            extra={
                "sample_id": self.h.sample_id,
                "upstream_id": self.h.upstream_id,
                "accepted_for_s": age,
                "retention_s": int(retention),
            },
        )
        return f"result_gone_upstream:not_found:retention_{int(retention)}s"

    def overdue(self, started: float) -> bool:
        caps = self.lane.caps
        return (
            caps.cancellable
            and caps.cancel_scope == "task"
            and time.monotonic() - started > self.policy().max_total_s
        )

    async def release_upstream(self, upstream_id: str | None) -> None:
        """A task we give up on is cancelled upstream where one task can be (Bright Data: an
        abandoned snapshot holds the dataset's concurrency cap until it ends). Best effort: a
        failed cancel is logged, the sample's end is written all the same."""
        caps = self.lane.caps
        if upstream_id is None or not caps.cancellable or caps.cancel_scope != "task":
            return
        try:
            async with self.lane.calls:
                result = await self.lane.connector.cancel(upstream_id)
            log.info(
                "abandoned upstream task cancelled",
                extra={
                    "sample_id": self.h.sample_id,
                    "upstream_id": upstream_id,
                    "cancelled": result.upstream_cancelled,
                },
            )
        except Exception as exc:  # a cancel must never keep the sample from ending
            log.warning(
                "cancel of an abandoned upstream task failed",
                extra={
                    "sample_id": self.h.sample_id,
                    "upstream_id": upstream_id,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )

    async def upstream_failed(
        self, upstream_id: str, ev: Evidence | None = None, credits: int | None = None
    ) -> None:
        """The accepted task failed upstream: charge per the platform's rule (billing decides),
        then a new attempt if attempts remain (R13, R15). ``credits``: what the vendor billed
        for the failed task, when its poll said so (DataForSEO bills at task_post)."""
        h, row = self.h, self.h.row
        d = classify(
            ErrorFacts(
                "upstream_failed",
                "submit",
                int(row["attempt_no"]),
                int(row.get("rate_limited") or 0),
                float(row.get("elapsed_s") or 0.0) + (time.monotonic() - h.claimed_at),
                waited_so_far=int(row.get("waited") or 0),
            ),
            self.policy(),
        )
        retry = d.action == "retry" and not h.cancelled
        if retry:
            RETRIES.labels(self.lane.platform, "upstream_failed").inc()
        await self.end(
            completion.Finish(
                h.sample_id,
                h.token,
                "queued" if retry else "failed",
                sub_to="planned" if retry else None,
                reason="CANCELLED" if h.cancelled else d.reason,
                delay_s=d.delay_s,
                outcome="failed",
                error_class="upstream_failed",
                charge=charge_for(h, upstream_id, "failed", ev, credits),
            )
        )

    async def complete(
        self, upstream_id: str, evidence: Evidence | None, unparseable: ConnectorError | None = None
    ) -> None:
        archived, ev_to, ev_reason, want_shot = await archive_for_completion(
            self.c.archive, self.h.row, evidence, unparseable, warc=self.c.warc,
            record_cap=self.c.record_cap,
        )  # fmt: skip
        if not self.c.warc:  # with WARC the batch stores the evidence (worker.context)
            crashpoint("stored_not_completed")
        await self.end(
            completion.Finish(
                self.h.sample_id,
                self.h.token,
                "completed",
                ev_to=ev_to,
                ev_reason=ev_reason,
                outcome="completed",
                deep=evidence.deep_thinking_used if evidence else None,
                shot=evidence.screenshot_used if evidence else None,
                want_shot=want_shot,
                charge=charge_for(self.h, upstream_id, "completed", evidence),
                archived=archived,
            )
        )

    # ------------------------------------------------------------------ the last write
    async def end(self, fin: completion.Finish) -> None:
        """The one fenced write that ends the attempt, then XACK (R11, R25). A failed write is
        retried while the lease holds; a stale token lets the sample go."""
        h, lane, c = self.h, self.lane, self.c
        fin.upstream_id = fin.upstream_id or h.upstream_id or h.row.get("upstream_id")
        if h.accept is not None:
            pending, h.accept = h.accept, None
            batcher = c.accepts_deferred if lane.caps.lookup_by_key else c.accepts
            rec = batcher.withdraw(pending) if fin.sub_to is None else None
            if rec is not None:
                fin.accept = rec  # written in the same transaction as the end
            else:
                try:
                    written = await pending
                except Exception:
                    # The acceptance write failed: the end write carries it, so the upstream
                    # id is written with the attempt's outcome, never dropped.
                    fin.accept = h.accept_rec
                else:
                    if not written:
                        self.stale()
                        return
        h.ending = True
        delay = 0.05
        while True:
            try:
                state = await c.finishes.submit(fin)
                break
            except Exception as exc:
                if not h.alive():
                    # We can no longer prove the lease: the sweeper hands the sample to the
                    # next worker, which looks the task up. Say what we held, where an operator
                    # finds it.
                    event(
                        log,
                        "samples.unwritten",
                        worker=c.id,
                        sample_id=h.sample_id,
                        token=h.token,
                        upstream_id=fin.accept.upstream_id if fin.accept else fin.upstream_id,
                        intended=fin.col_to,
                        error=f"{type(exc).__name__}: {str(exc)[:200]}",
                    )
                    h.ending = False
                    raise LeaseLost(f"sample {h.sample_id}: end not written") from exc
                log.warning("end of %s not written (%s); retrying", h.sample_id, exc)
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
        if state is None:
            self.stale()
            return
        EXECUTION_TIME.labels(lane.platform).observe(time.monotonic() - h.claimed_at)
        PROCESSED.labels(lane.platform, fin.outcome or state).inc()
        if state == "completed":
            c.report["completed"] += 1
        elif state == "failed":
            c.report["failed"] += 1
        else:
            c.report["retried"] += 1
            if fin.delay_s < 600:  # a retry coming due wakes the lane (the sweeper backs this up)
                asyncio.get_running_loop().call_later(fin.delay_s + 0.01, lane.wake.set)
        crashpoint("completed_not_acked")
        for e in h.entries:
            c.acks.submit(e)
        lane.release(h)

    def stale(self) -> None:
        """Our token is no longer current: the sample was taken over. Drop it, write nothing."""
        h = self.h
        self.c.report["stale"] += 1
        h.lost = True
        for e in h.entries:
            self.c.acks.submit(e)
        self.lane.release(h)

    async def let_go(self) -> None:
        """Self-fenced out (or the end could not be written): one fenced hand-back, which writes
        nothing if the sample is someone else's now, then forget it."""
        h = self.h
        fin = completion.Finish(
            h.sample_id,
            h.token,
            "queued",
            reason="lease_lost",
            accept=h.acceptance_unconfirmed(),
            upstream_id=h.upstream_id,
        )
        try:
            await self.c.db(completion.finish_batch, owner=self.c.id, items=[fin])
        except Exception as exc:  # the sweeper re-queues it when the lease runs out
            log.warning("hand-back of %s failed: %s", h.sample_id, exc)
        self.c.report["let_go"] += 1
        event(log, "lease.let_go", worker=self.c.id, sample_id=h.sample_id, token=h.token)
        h.lost = True
        for e in h.entries:
            self.c.acks.submit(e)
        self.lane.release(h)

    async def unexpected(self, exc: Exception) -> None:
        """A bug or an outage outside the connector contract: hand back with a growing delay;
        after max_worker_errors, fail with the error's summary and a dead letter."""
        h, s = self.h, self.c.s
        log.exception("sample failed unexpectedly", extra={"sample_id": h.sample_id})
        n = int(h.row.get("worker_errors") or 0) + 1
        summary = f"{type(exc).__name__}: {str(exc)[:200]}"
        final = n >= s.max_worker_errors
        fin = completion.Finish(
            h.sample_id,
            h.token,
            "failed" if final else "queued",
            reason=f"worker_error:{type(exc).__name__}" if final else "worker_error",
            delay_s=min(300.0, s.worker_error_delay_s * 2 ** (n - 1)),
            outcome="failed" if final else None,
            error_class="worker_error",
            error_detail=summary,
        )
        try:
            await self.end(fin)
        except Exception as again:
            log.warning("could not end %s after a worker error: %s", h.sample_id, again)
            h.lost = True
            self.lane.release(h)
            return
        if final and not h.lost:
            await self.c.db(
                ex.record_dead_letter,
                stream=self.lane.key,
                message_id=f"sample:{h.sample_id}:{h.token}",
                event_id=None,
                sample_id=h.sample_id,
                deliveries=n,
                reason=f"worker_error after {n} tries: {summary}",
            )
            self.c.report["dead_lettered"] += 1

    def policy(self) -> RetryPolicy:
        """The worker's retry policy with the run's own max_attempts, when its config sets one."""
        ma = self.h.row.get("max_attempts")
        return dataclasses.replace(self.c.s.retry, max_attempts=int(ma)) if ma else self.c.s.retry


def request_for(lane: Lane, row: Mapping[str, Any]) -> SubmitRequest:
    return SubmitRequest(
        sample_id=row["sample_id"],
        attempt_no=int(row["attempt_no"]),
        tenant_id=row["tenant_id"],
        question=row["question"],
        platform=row["platform"],
        device=row["device"],
        region=row["region"],
        mode=row["mode"],
        screenshot=row["screenshot_policy"] != "off" and lane.caps.screenshot,
    )


def charge_for(
    h: Held, upstream_id: str, outcome: str, ev: Evidence | None, credits: int | None = None
) -> ChargeRequest:
    row = h.row
    return ChargeRequest(
        tenant_id=row["tenant_id"],
        run_id=row["run_id"],
        sample_id=h.sample_id,
        attempt_no=int(row["attempt_no"]),
        upstream_id=upstream_id,
        platform=row["platform"],
        mode=row["mode"],
        upstream_outcome=outcome,
        deep_thinking_used=bool(ev and ev.deep_thinking_used),
        web_search_used=bool(ev and ev.web_search_used),
        screenshot_used=bool(ev and ev.screenshot_used),
        usage=ev.usage if ev else None,  # request-level tokens, recorded with the attempt
        vendor_credits=ev.vendor_credits if ev else credits,
    )

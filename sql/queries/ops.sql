-- name: report_samples
-- One row per sample of a run for the report (R7): identity, the four state layers with their
-- reasons, and the latest answer revision's sanitised rendering (R19: never the raw text). Where
-- the display is derived (sanitized_html = '': rendered at read time, evidence.display) the text
-- comes along as display_source, which report.py turns into the sanitised rendering and drops.
SELECT s.sample_id, s.question_index, s.question_revision, q.text AS question, s.channel,
       s.platform, s.device, s.region, s.mode, s.repeat_index, s.screenshot_policy,
       s.submission_state, s.collection_state, s.evidence_state, s.analysis_state,
       s.submission_reason, s.collection_reason, s.evidence_reason, s.analysis_reason,
       s.attempt_no, s.upstream_id, s.completed_at,
       a.revision AS answer_revision, a.sanitized_html, a.validity, a.validity_reason,
       a.warnings, a.captured_at, a.display_source,
       a.web_search_used, a.search_queries,
       -- each attempt with what we charged for it (NULL: no charge entry), so a retried
       -- sample says which attempt was billed and why the other was not (issue #34)
       (SELECT coalesce(json_agg(json_build_object(
                  'attempt_no', t.attempt_no, 'outcome', t.outcome, 'error_class', t.error_class,
                  'charged_minor', (SELECT sum(l.amount_minor) FROM geo.ledger_entries l
                                    WHERE l.sample_id = t.sample_id
                                      AND l.attempt_no = t.attempt_no AND l.kind = 'charge'))
                ORDER BY t.attempt_no), '[]'::json)
          FROM geo.attempts t WHERE t.sample_id = s.sample_id) AS attempt_billing
FROM geo.samples s
JOIN geo.question_revisions q USING (question_revision)
LEFT JOIN LATERAL (
  SELECT revision, sanitized_html, validity, validity_reason, warnings, captured_at,
         CASE WHEN sanitized_html = '' THEN raw_text END AS display_source,
         web_search_used, search_queries
  FROM geo.answers WHERE sample_id = s.sample_id ORDER BY revision DESC LIMIT 1
) a ON true
WHERE s.run_id = %(run_id)s
ORDER BY s.question_index, s.channel, s.region, s.mode, s.repeat_index;

-- name: report_sample_mentions
-- Per sample, the mention facts the rates count (analytics.sample_brand_facts: the current
-- analysis of the latest answer): whether the answer mentions the target brand (NULL while its
-- mentions are not known: analysing, invalid, failed) and the competitors it names, in order of
-- first mention. The CSV/JSON carry them so a rate can be traced to its answers.
SELECT sample_id,
       bool_or(mentioned) FILTER (WHERE is_target) AS brand_mentioned,
       coalesce(array_agg(brand ORDER BY first_offset, brand_order)
                  FILTER (WHERE mentioned AND NOT is_target), '{}') AS competitors_mentioned
FROM analytics.sample_brand_facts
WHERE run_id = %(run_id)s
GROUP BY sample_id;

-- name: report_citations
-- Citations of each sample's latest answer revision, in the engine's order (R17, R18).
SELECT c.sample_id, c.ordinal, c.relation, c.raw_url, c.normalized_url, c.registrable_domain,
       c.title
FROM geo.citations c
JOIN geo.samples s ON s.sample_id = c.sample_id
WHERE s.run_id = %(run_id)s
  AND c.revision = (SELECT max(revision) FROM geo.answers a WHERE a.sample_id = c.sample_id)
ORDER BY c.sample_id, c.ordinal;

-- name: report_media
-- The latest screenshot and thumbnail object of each sample (R20, R21): where they are stored,
-- never the bytes.
SELECT DISTINCT ON (e.sample_id, e.kind)
       e.sample_id, e.kind, e.storage_key, e.mime_type, e.size_bytes, e.sha256, e.revision
FROM geo.evidence_objects e
WHERE e.run_id = %(run_id)s AND e.kind IN ('screenshot', 'thumbnail')
ORDER BY e.sample_id, e.kind, e.revision DESC;

-- name: report_ledger
-- Money of a run by entry kind (R23, R24), integer minor units.
SELECT kind, currency, count(*) AS entries, coalesce(sum(amount_minor), 0)::bigint AS amount_minor
FROM geo.ledger_entries WHERE run_id = %(run_id)s
GROUP BY kind, currency ORDER BY kind;

-- name: report_reconciliation
-- Reconciliation of a run's charges against the platforms' fee statements, by classification.
-- theirs_exact_minor: the vendor's exact amount where it bills fractions of a minor unit
-- (credits x credit price, detail.cost_exact_minor), the stored whole minor units elsewhere.
-- theirs_minor and difference_minor are that exact sum rounded ONCE, half away from zero
-- (round(numeric), as domain.billing.round_minor): never a sum of per-line roundings, so the
-- figures agree with the summary and with the words beside them.
SELECT classification, currency, lines, ours_minor,
       round(theirs_exact_minor)::bigint AS theirs_minor,
       round(theirs_exact_minor - ours_minor)::bigint AS difference_minor,
       theirs_exact_minor
FROM (
  SELECT classification, currency, count(*) AS lines,
         coalesce(sum(ours_minor), 0)::bigint AS ours_minor,
         coalesce(sum(coalesce((detail->>'cost_exact_minor')::numeric, theirs_minor)), 0)
           AS theirs_exact_minor
  FROM geo.reconciliation_lines WHERE run_id = %(run_id)s
  GROUP BY classification, currency
) AS by_class
ORDER BY classification;

-- name: relation_exists
-- Whether an optional relation (e.g. an analyst view landing later) exists.
SELECT to_regclass(%(name)s) IS NOT NULL AS present;

-- name: retention_due_runs
-- Runs past one of their tenant's windows (D9) whose every sample is terminal: work in flight is
-- never touched, however old. Two windows: raw evidence (objects, raw answer text) after
-- retention_days; the execution log (attempts, state transitions) after log_retention_days
-- (NULL: the same). Database time comes in as %(now)s so a dry run and the real pass agree, and
-- tests can move the clock. A window the pass has marked as having nothing left
-- (runs.raw_expired_at / log_expired_at, 0050) is not checked again: a pass costs the runs with
-- something to expire, not the history.
WITH w AS (
  SELECT r.run_id, r.tenant_id, r.created_at, r.raw_expired_at, r.log_expired_at, t.retention_days,
         coalesce(t.log_retention_days, t.retention_days) AS log_retention_days,
         %(now)s::timestamptz - make_interval(days => t.retention_days) AS cutoff,
         %(now)s::timestamptz
           - make_interval(days => coalesce(t.log_retention_days, t.retention_days)) AS log_cutoff
  FROM geo.runs r JOIN geo.tenants t USING (tenant_id)
  -- only runs with a window not yet marked done: through runs_unexpired (0057), not the history
  WHERE r.raw_expired_at IS NULL OR r.log_expired_at IS NULL
)
SELECT w.run_id, w.tenant_id, w.retention_days, w.log_retention_days, w.created_at, w.cutoff,
       w.log_cutoff, w.created_at < w.cutoff AND w.raw_expired_at IS NULL AS raw_due,
       w.created_at < w.log_cutoff AND w.log_expired_at IS NULL AS log_due
FROM w
WHERE ((w.created_at < w.cutoff AND w.raw_expired_at IS NULL)  -- past an unmarked window
       OR (w.created_at < w.log_cutoff AND w.log_expired_at IS NULL))
  -- A scalar subquery, probed per candidate run through samples_run_channel (that run's
  -- samples): as a NOT EXISTS the planner made it an anti-join over a scan of every sample once
  -- no partial index covered queued/running samples by run (0069 dropped samples_due; 3 -> 30
  -- days: 9,015 -> 11,454 rows read, test_retention_growth).
  AND NOT (SELECT EXISTS (SELECT 1 FROM geo.samples s
                           WHERE s.run_id = w.run_id AND s.collection_state IN ('queued', 'running')))
  AND ((w.created_at < w.cutoff AND w.raw_expired_at IS NULL
        AND (EXISTS (SELECT 1 FROM geo.evidence_objects e WHERE e.run_id = w.run_id)
             OR EXISTS (SELECT 1 FROM geo.warc_records k WHERE k.run_id = w.run_id)
             OR EXISTS (SELECT 1 FROM geo.answers a WHERE a.raw_text IS NOT NULL
                         AND a.sample_id = ANY (ARRAY(SELECT s.sample_id FROM geo.samples s
                               WHERE s.run_id = w.run_id AND s.analysis_state <> 'pending')))))
       OR (w.created_at < w.log_cutoff AND w.log_expired_at IS NULL
           AND (EXISTS (SELECT 1 FROM geo.attempts a WHERE a.sample_id = ANY (ARRAY(
                          SELECT s.sample_id FROM geo.samples s WHERE s.run_id = w.run_id)))
                -- per sample through state_transitions_sample (0057's note): never a scan of
                -- the whole log, however the planner guesses its size
                OR EXISTS (SELECT 1 FROM geo.state_transitions t WHERE t.sample_id = ANY (ARRAY(
                             SELECT s.sample_id FROM geo.samples s WHERE s.run_id = w.run_id))))))
ORDER BY w.created_at, w.run_id
LIMIT %(limit)s;

-- name: retention_mark_run
-- After a run's step (same transaction): mark each window the step was due on and left nothing
-- of (0050), so later passes skip it. No mark while anything is left (history refused to the
-- role): the next pass checks again. A sample that went back to work since the due check wrote
-- a transition: seen here (no log mark), or committed after this and clearing the mark. The conditions are
-- ops.retention_due_runs's, for one run. Raw text kept for a pending analysis does not stop the
-- mark: the analysis finishing writes a transition, which clears the run's marks (0050's trigger)
-- so the next pass clears that text.
UPDATE geo.runs r SET
  raw_expired_at = CASE WHEN %(raw_due)s
    AND NOT EXISTS (SELECT 1 FROM geo.evidence_objects e WHERE e.run_id = r.run_id)
    AND NOT EXISTS (SELECT 1 FROM geo.warc_records k WHERE k.run_id = r.run_id)
    AND NOT EXISTS (SELECT 1 FROM geo.answers a WHERE a.raw_text IS NOT NULL
                     AND a.sample_id = ANY (ARRAY(SELECT s.sample_id FROM geo.samples s
                           WHERE s.run_id = r.run_id AND s.analysis_state <> 'pending')))
    THEN %(now)s::timestamptz ELSE r.raw_expired_at END,
  log_expired_at = CASE WHEN %(log_due)s
    AND NOT EXISTS (SELECT 1 FROM geo.attempts a WHERE a.sample_id = ANY (ARRAY(
                     SELECT s.sample_id FROM geo.samples s WHERE s.run_id = r.run_id)))
    AND NOT EXISTS (SELECT 1 FROM geo.state_transitions t WHERE t.sample_id = ANY (ARRAY(
                     SELECT s.sample_id FROM geo.samples s WHERE s.run_id = r.run_id)))
    THEN %(now)s::timestamptz ELSE r.log_expired_at END
WHERE r.run_id = %(run_id)s;

-- name: retention_objects
-- The raw evidence objects of one run: what the archive holds for it.
SELECT object_id, sample_id, kind, storage_key, size_bytes
FROM geo.evidence_objects WHERE run_id = %(run_id)s ORDER BY object_id;

-- name: retention_warc_objects
-- The run's WARC batch objects the index names (issue 33).
SELECT DISTINCT object_key FROM geo.warc_records WHERE run_id = %(run_id)s ORDER BY object_key;

-- name: retention_delete_warc_records
-- After the run's WARC objects are gone (as retention_delete_objects).
DELETE FROM geo.warc_records WHERE run_id = %(run_id)s;

-- name: retention_attempt_count
SELECT count(*) AS n FROM geo.attempts a JOIN geo.samples s USING (sample_id)
WHERE s.run_id = %(run_id)s;

-- name: retention_raw_text_count
-- Raw answer texts still held; an answer whose analysis has not finished keeps its text, the
-- analysis reads it.
SELECT count(*) AS n FROM geo.answers a JOIN geo.samples s USING (sample_id)
WHERE s.run_id = %(run_id)s AND a.raw_text IS NOT NULL AND s.analysis_state <> 'pending';

-- name: retention_transition_count
SELECT count(*) AS n FROM geo.state_transitions t
WHERE t.sample_id = ANY (ARRAY(SELECT s.sample_id FROM geo.samples s WHERE s.run_id = %(run_id)s));

-- name: retention_delete_objects
-- Rows go after their bytes are gone from the archive: a crash in between leaves a row whose
-- object is missing, which the next pass deletes again (idempotent), never an orphaned object.
DELETE FROM geo.evidence_objects WHERE object_id = ANY(%(object_ids)s::bigint[]);

-- name: retention_delete_attempts
DELETE FROM geo.attempts a USING geo.samples s
WHERE a.sample_id = s.sample_id AND s.run_id = %(run_id)s;

-- name: retention_clear_raw_text
-- The sanitised version (what is displayed), the digests, validity and the analysis stay.
UPDATE geo.answers a SET raw_text = NULL, raw_expired_at = %(now)s
FROM geo.samples s
WHERE a.sample_id = s.sample_id AND s.run_id = %(run_id)s AND a.raw_text IS NOT NULL
  AND s.analysis_state <> 'pending';

-- name: retention_delete_transitions
-- Through the samples, so the per-sample index is used (the log has no run index: a hot table):
-- the run's sample ids as an array, probed one by one, never a join the planner could answer
-- with a scan of the whole log (whose pages the history's deleted rows leave behind).
DELETE FROM geo.state_transitions t
WHERE t.sample_id = ANY (ARRAY(SELECT s.sample_id FROM geo.samples s WHERE s.run_id = %(run_id)s));

-- name: retention_log_insert
INSERT INTO geo.retention_log (run_id, tenant_id, retention_days, cutoff, objects_deleted,
                               bytes_deleted, attempts_deleted, log_retention_days,
                               answers_cleared, transitions_deleted)
VALUES (%(run_id)s, %(tenant_id)s, %(retention_days)s, %(cutoff)s, %(objects_deleted)s,
        %(bytes_deleted)s, %(attempts_deleted)s, %(log_retention_days)s, %(answers_cleared)s,
        %(transitions_deleted)s);

-- name: retention_outbox_count
SELECT count(*) AS n FROM geo.outbox
WHERE published_at IS NOT NULL AND published_at < %(cutoff)s;

-- name: retention_delete_outbox
-- Published rows only: an unpublished row is work the relay still owes. In chunks, so a first
-- pass over months of rows never holds one huge delete.
DELETE FROM geo.outbox WHERE outbox_id IN (
  SELECT outbox_id FROM geo.outbox
  WHERE published_at IS NOT NULL AND published_at < %(cutoff)s
  ORDER BY outbox_id LIMIT %(limit)s);

-- name: retention_dead_letter_count
SELECT count(*) AS n FROM geo.dead_letters d
WHERE d.at < %(old_cutoff)s
   OR (d.at < %(resolved_cutoff)s
       AND EXISTS (SELECT 1 FROM geo.samples s WHERE s.sample_id = d.sample_id
                    AND s.collection_state IN ('completed', 'failed')));

-- name: retention_delete_dead_letters
-- A dead letter is settled once its sample reached a terminal state (the sweeper re-derived the
-- work from PostgreSQL); settled ones go after a short grace, any after the long window.
DELETE FROM geo.dead_letters d
WHERE d.at < %(old_cutoff)s
   OR (d.at < %(resolved_cutoff)s
       AND EXISTS (SELECT 1 FROM geo.samples s WHERE s.sample_id = d.sample_id
                    AND s.collection_state IN ('completed', 'failed')));

-- name: retention_of_run
SELECT retention_days, cutoff, objects_deleted, bytes_deleted, attempts_deleted, applied_at
FROM geo.retention_log WHERE run_id = %(run_id)s ORDER BY retention_id;

-- name: database_now
-- The database clock: leases and state changes use it, so retention does too (R11).
SELECT now() AS now;

-- name: report_mention_rates
-- Mention rates per channel and brand from the analyst table (run x channel x brand), with THE
-- 95 percent interval (question-clustered where questions are pooled), its method, effective n
-- and the sample sizes behind every rate. Every report (terminal, HTML, JSON) reads this. The
-- rate and its bounds unrounded: a person's view rounds them once (rounded here to 3 decimals
-- first, an upper bound of 0.625045 read "62 percent").
SELECT channel, brand, is_target, samples, valid_samples, invalid_samples, analysing_samples,
       review_samples, failed_samples, n, mentions,
       mention_rate, mention_rate_lower, mention_rate_upper,
       mention_rate_interval,
       questions,
       round(n_effective::numeric, 1) AS n_effective,
       round(avg_rank::numeric, 2) AS avg_rank,
       round(citation_rate::numeric, 3) AS citation_rate
FROM analytics.channel_brand_metrics
WHERE run_id = %(run_id)s
ORDER BY channel, is_target DESC, brand;

-- name: evidence_missing_rate
-- R26: of the samples completed in the window, the share whose evidence is partial or failed.
SELECT count(*) FILTER (WHERE evidence_state IN ('partial', 'failed')) AS missing,
       count(*) AS completed
FROM geo.samples
WHERE collection_state = 'completed'
  AND completed_at >= now() - make_interval(secs => %(window_s)s);

-- name: backlog_by_platform
-- R26 / D1: the work waiting in PostgreSQL per platform. queued counts samples due now (a
-- sample backing off is not work a new worker could take); running holds a lease; uncertain
-- waits for a lookup or an operator. Only samples a worker may take count: the run confirmed,
-- its (run, channel) dispatched (workers scaled for held work would sit idle). Reads only the
-- in-flight rows: queued OR running, spelt so, is a BitmapOr of the two partial indexes
-- samples_queued_tenant_priority and samples_running_tenant (migration 0069).
SELECT s.platform AS platform,
       count(*) FILTER (WHERE s.collection_state = 'queued'
                          AND s.submission_state <> 'uncertain'
                          AND s.next_attempt_at <= now()) AS queued,
       count(*) FILTER (WHERE s.collection_state = 'running') AS running,
       count(*) FILTER (WHERE s.submission_state = 'uncertain') AS uncertain,
       coalesce(extract(epoch FROM now() - min(s.next_attempt_at) FILTER (
         WHERE s.collection_state = 'queued' AND s.submission_state <> 'uncertain'
           AND s.next_attempt_at <= now())), 0)::float8 AS oldest_queued_s
FROM geo.samples s
JOIN geo.runs r ON r.run_id = s.run_id AND r.confirmed_at IS NOT NULL
WHERE (s.collection_state = 'queued' OR s.collection_state = 'running')
  AND EXISTS (SELECT 1 FROM geo.run_dispatches d
               WHERE d.run_id = s.run_id AND d.channel = s.channel)
GROUP BY s.platform;

-- name: open_dead_letters_by_platform
-- Dead letters whose sample has not settled yet: the ones someone may have to look at.
SELECT split_part(d.stream, ':', 2) AS platform, count(*) AS n
FROM geo.dead_letters d
WHERE NOT EXISTS (SELECT 1 FROM geo.samples s WHERE s.sample_id = d.sample_id
                   AND s.collection_state IN ('completed', 'failed'))
GROUP BY 1;

-- name: reconciliation_difference
-- R26: unexplained difference between our charges and the fee statements, per currency, over
-- every run: the sum of |theirs - ours| over the lines %(explained)s (THE predicate,
-- geo_pipeline.domain.billing.EXPLAINED) leaves unexplained. Absolute, so that a run billed
-- too much and one billed too little never cancel to 0 (issue #34). Each line's difference is
-- exact (theirs exact, detail.cost_exact_minor, - ours); the sum is rounded ONCE, half away from
-- zero (round(numeric), as domain.billing.round_minor), like every total of the summary.
SELECT currency,
       round(coalesce(sum(abs(coalesce((detail->>'cost_exact_minor')::numeric, theirs_minor)
                              - ours_minor)), 0))::bigint AS difference_minor
FROM geo.reconciliation_lines
WHERE NOT (classification = ANY(%(explained)s::text[]))
GROUP BY currency;

-- name: report_brand_trends
-- The trend of a monitor's run: every brand's mention rate per channel and day of the run's
-- monitor over the %(days)s days up to the run's day (analytics.brand_trends: the question-
-- clustered 95 percent interval, and whether analytics.brand_changes flagged the day's change
-- day over day or over rolling 7 days), with the false discovery rate q of those flags.
-- Empty for a run outside a monitor.
WITH this AS (
  SELECT monitor_id, scheduled_for
  FROM geo.runs
  WHERE run_id = %(run_id)s AND monitor_id IS NOT NULL AND scheduled_for IS NOT NULL
), fdr AS (
  -- the rate is one for every change of the monitor: any one row says it (max() over all of
  -- them read the monitor's whole history, issue 39); NULL when none was tested
  SELECT (SELECT c.fdr_q FROM analytics.brand_changes c
           JOIN this ON c.monitor_id = this.monitor_id
          ORDER BY c.scheduled_for DESC LIMIT 1) AS fdr_q
)
SELECT t.channel, t.brand, t.is_target, t.scheduled_for, t.n, t.mentions, t.questions,
       t.mention_rate, t.mention_rate_lower, t.mention_rate_upper, t.n_effective,
       t.flagged_day_over_day, t.flagged_rolling_7d, fdr.fdr_q
FROM analytics.brand_trends t
JOIN this ON t.monitor_id = this.monitor_id
 AND t.scheduled_for BETWEEN this.scheduled_for - (%(days)s - 1) AND this.scheduled_for
CROSS JOIN fdr
ORDER BY t.channel, t.is_target DESC NULLS LAST, t.brand, t.scheduled_for;

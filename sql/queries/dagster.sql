-- Queries of the Dagster layer (geo_pipeline/defs). State COUNTS come from the one aggregation
-- service (store/status.py, R7); these queries list partitions, find rule violations for the
-- asset checks, and describe a partition's evidence, analysis and billing rows.

-- name: partition_samples
-- The identity (R5) and batch of every sample of one (run, channel) partition (what a failing
-- identity check lists its examples from).
SELECT sample_id, question_revision, platform, device, region, mode, repeat_index, batch_no
FROM geo.samples WHERE run_id = %(run_id)s AND channel = %(channel)s
ORDER BY sample_id;

-- name: run_plan_facts
-- What the plan checks of a run need of its samples, in ONE grouped pass over the run (found by
-- the run_id prefix of samples_run_channel): per (channel, platform, batch) the samples, and how
-- many of their ids are not the hash of their identity (R5). That count is 0 by the database's
-- own guarantee while the check sample_id_is_identity_hash is in force (migration 0033: every
-- row was checked when written), so it is computed only when the check is not (dropped, or
-- NOT VALID): the hash is not paid twice per sample (issue 39). With the primary key, ids that
-- are their identity's hash are also unique identities: a duplicate needs a wrong id.
-- priority: the highest of the group's samples, what a new run's first collect hint of the
-- (batch, channel) carries (runs.dispatch_new_run: no second pass over the run).
SELECT s.channel, s.platform, s.batch_no, count(*) AS n, max(s.priority) AS priority,
       count(*) FILTER (WHERE NOT k.enforced AND s.sample_id IS DISTINCT FROM
                        geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,
                                          s.region, s.mode, s.repeat_index)) AS wrong_ids
FROM geo.samples s
CROSS JOIN (SELECT geo.sample_id_check_in_force() AS enforced OFFSET 0) k  -- once, not per row
WHERE s.run_id = %(run_id)s
GROUP BY s.channel, s.platform, s.batch_no;

-- name: partition_plan_facts
-- run_plan_facts of one (run, channel) partition: its rows only (samples_run_channel).
SELECT s.channel, s.platform, s.batch_no, count(*) AS n,
       count(*) FILTER (WHERE NOT k.enforced AND s.sample_id IS DISTINCT FROM
                        geo.sample_id_for(s.run_id, s.question_revision, s.platform, s.device,
                                          s.region, s.mode, s.repeat_index)) AS wrong_ids
FROM geo.samples s
CROSS JOIN (SELECT geo.sample_id_check_in_force() AS enforced OFFSET 0) k  -- once, not per row
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
GROUP BY s.channel, s.platform, s.batch_no;

-- name: run_batches
-- The recorded batches of a run (their counts are compared with run_plan_facts').
SELECT b.batch_no, b.size, b.platform_counts FROM geo.batches b
WHERE b.run_id = %(run_id)s
ORDER BY b.batch_no;

-- name: batches_with_counts
-- The given batches of a run with the number of samples that really carry each batch number,
-- per platform (R3: a batch is within the submit cap and each platform's cap). One grouped pass
-- over the run's samples (found by the run_id prefix of the samples_run_channel index), not a
-- count per batch: a plan check costs the run's rows, whatever its batches and channels.
SELECT b.batch_no, b.size, b.platform_counts,
       coalesce(a.actual_counts, '{}'::jsonb) AS actual_counts
FROM geo.batches b
LEFT JOIN (
  SELECT x.batch_no, jsonb_object_agg(x.platform, x.n) AS actual_counts
  FROM (SELECT s.batch_no, s.platform, count(*) AS n FROM geo.samples s
         WHERE s.run_id = %(run_id)s AND s.batch_no = ANY (%(batch_nos)s::int[])
         GROUP BY s.batch_no, s.platform) x
  GROUP BY x.batch_no
) a USING (batch_no)
WHERE b.run_id = %(run_id)s AND b.batch_no = ANY (%(batch_nos)s::int[])
ORDER BY b.batch_no;

-- name: dispatched_count
-- How many samples of the partition are dispatched: their (batch, channel) has its collect hint
-- in the outbox (written once), or, for runs dispatched before migration 0010, the sample its own.
SELECT count(*) AS n FROM geo.samples s
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND (EXISTS (SELECT 1 FROM geo.outbox o
                WHERE o.kind = 'collect' AND o.sample_id IS NULL AND o.run_id = s.run_id
                  AND o.channel = s.channel AND o.batch_no = s.batch_no)
       OR EXISTS (SELECT 1 FROM geo.outbox o WHERE o.sample_id = s.sample_id AND o.kind = 'collect'));

-- name: accepted_without_record
-- Samples the collection layer treats as accepted upstream (R9, R12) with no acceptance record
-- carrying the same upstream id: money or evidence that cannot be traced to a request.
SELECT s.sample_id, s.upstream_id FROM geo.samples s
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND (s.submission_state = 'accepted' OR s.collection_state = 'completed')
  AND NOT EXISTS (SELECT 1 FROM geo.upstream_requests u
                   WHERE u.sample_id = s.sample_id AND u.state = 'accepted'
                     AND u.upstream_id = s.upstream_id)
ORDER BY s.sample_id LIMIT 1000;

-- name: duplicate_completions
-- Samples whose transition log records reaching 'completed' more than once (R5, R25).
SELECT t.sample_id, count(*) AS completions FROM geo.state_transitions t
JOIN geo.samples s ON s.sample_id = t.sample_id
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND t.layer = 'collection' AND t.to_state = 'completed'
GROUP BY t.sample_id HAVING count(*) > 1
ORDER BY t.sample_id LIMIT 1000;

-- name: incomplete_evidence
-- Completed samples whose evidence is stored or partial but whose latest answer is missing or
-- lacks a required field (R22 field completeness), and completed samples with no upstream id.
WITH latest AS (
  SELECT DISTINCT ON (a.sample_id) a.* FROM geo.answers a
  JOIN geo.samples s ON s.sample_id = a.sample_id
  WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  ORDER BY a.sample_id, a.revision DESC)
SELECT s.sample_id,
       CASE WHEN l.sample_id IS NULL THEN 'no answer row'
            WHEN s.upstream_id IS NULL THEN 'no upstream id'
            WHEN l.raw_sha256 IS NULL OR length(l.raw_sha256) <> 64 THEN 'no raw digest'
            WHEN l.validity_rule_version = '' THEN 'no validity rule version'
            ELSE 'no capture time' END AS problem
FROM geo.samples s LEFT JOIN latest l ON l.sample_id = s.sample_id
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND s.collection_state = 'completed' AND s.evidence_state IN ('stored', 'partial')
  AND (l.sample_id IS NULL OR s.upstream_id IS NULL OR l.raw_sha256 IS NULL
       OR length(l.raw_sha256) <> 64 OR l.validity_rule_version = '' OR l.captured_at IS NULL)
ORDER BY s.sample_id LIMIT 1000;

-- name: shared_upstream_ids
-- One upstream answer attributed to two samples would be counted (and paid) twice (R5, R24).
SELECT upstream_id, array_agg(sample_id ORDER BY sample_id) AS sample_ids FROM geo.samples
WHERE run_id = %(run_id)s AND channel = %(channel)s AND upstream_id IS NOT NULL
GROUP BY upstream_id HAVING count(*) > 1
ORDER BY upstream_id LIMIT 1000;

-- name: validity_breakdown
-- The latest answer of every sample of the partition, by validity and reason (R22).
SELECT l.validity, coalesce(l.validity_reason, '') AS reason, count(*) AS n FROM (
  SELECT DISTINCT ON (a.sample_id) a.validity, a.validity_reason FROM geo.answers a
  JOIN geo.samples s ON s.sample_id = a.sample_id
  WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  ORDER BY a.sample_id, a.revision DESC) l
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: untraceable_citations
-- Citations that cannot be traced (R18, R22): a URL missing, or the answer they belong to has
-- no archived raw answer object.
SELECT c.sample_id, c.revision, c.ordinal,
       CASE WHEN coalesce(c.raw_url, '') = '' THEN 'no raw url'
            WHEN coalesce(c.normalized_url, '') = '' THEN 'no normalised url'
            ELSE 'answer not archived' END AS problem
FROM geo.citations c JOIN geo.samples s ON s.sample_id = c.sample_id
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND (coalesce(c.raw_url, '') = '' OR coalesce(c.normalized_url, '') = ''
       OR NOT EXISTS (SELECT 1 FROM geo.evidence_objects e
                       WHERE e.sample_id = c.sample_id AND e.kind = 'answer_raw'))
ORDER BY c.sample_id, c.revision, c.ordinal LIMIT 1000;

-- name: citation_count
-- Citation rows of a partition, cited and retrieved apart (the names the CSV and analysts.md use).
SELECT count(*) FILTER (WHERE c.relation = 'cited') AS cited,
       count(*) FILTER (WHERE c.relation = 'retrieved') AS retrieved
FROM geo.citations c JOIN geo.samples s ON s.sample_id = c.sample_id
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s;

-- name: screenshot_coverage
-- Per screenshot policy: completed samples, and how many have no archived screenshot (R6, R21).
SELECT s.screenshot_policy AS policy, count(*) AS completed,
       count(*) FILTER (WHERE NOT EXISTS (
         SELECT 1 FROM geo.evidence_objects e
          WHERE e.sample_id = s.sample_id AND e.kind = 'screenshot')) AS missing
FROM geo.samples s
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s AND s.collection_state = 'completed'
GROUP BY 1 ORDER BY 1;

-- name: objects_to_verify
-- A deterministic spread of the partition's archived objects (answers and screenshots) to
-- re-read from storage: the same sample each time, so a failure can be reproduced.
SELECT e.sample_id, e.kind, e.revision, e.storage_key, e.sha256
FROM geo.evidence_objects e JOIN geo.samples s ON s.sample_id = e.sample_id
WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  AND e.kind IN ('answer_raw', 'screenshot')
ORDER BY md5(e.sample_id || e.kind || e.revision) LIMIT %(limit)s;

-- name: valid_not_analysed
-- Samples whose latest answer is valid but that have no analysis result for that revision, or
-- whose analysis layer is still pending (R6: such a sample must show "analysing").
WITH latest AS (
  SELECT DISTINCT ON (a.sample_id) a.sample_id, a.revision, a.validity FROM geo.answers a
  JOIN geo.samples s ON s.sample_id = a.sample_id
  WHERE s.run_id = %(run_id)s AND s.channel = %(channel)s
  ORDER BY a.sample_id, a.revision DESC)
SELECT l.sample_id, s.analysis_state FROM latest l JOIN geo.samples s USING (sample_id)
WHERE l.validity = 'valid' AND s.evidence_state IN ('stored', 'partial')
  AND (s.analysis_state = 'pending'
       OR NOT EXISTS (SELECT 1 FROM geo.analysis_results r
                       WHERE r.sample_id = l.sample_id AND r.answer_revision = l.revision))
ORDER BY l.sample_id LIMIT 1000;

-- name: pending_reported_not_mentioned
-- What analysts read (analytics.sample_brand_facts) must never carry a "not mentioned" for a
-- sample whose analysis is pending, in review or failed, or whose answer is not valid (R6):
-- mention facts exist only where mention_status is 'known'.
SELECT DISTINCT f.sample_id, f.analysis_state, f.mention_status FROM analytics.sample_brand_facts f
WHERE f.run_id = %(run_id)s AND f.channel = %(channel)s
  AND f.mentioned IS NOT NULL
  AND (f.mention_status <> 'known' OR f.analysis_state <> 'accepted')
ORDER BY f.sample_id LIMIT 1000;

-- name: channel_visibility
-- The analyst table of one (run, channel): one row per tracked brand.
SELECT brand, is_target, samples, valid_samples, invalid_samples, analysing_samples,
       collecting_samples, failed_samples, review_samples, n, mentions, mention_rate,
       -- THE interval (question-clustered where pooled), its method and effective n
       mention_rate_lower, mention_rate_upper, mention_rate_interval, questions, n_effective,
       mention_rate_wilson_lower, mention_rate_wilson_upper,
       avg_rank, domain_cited, citation_rate
FROM analytics.channel_brand_metrics
WHERE run_id = %(run_id)s AND channel = %(channel)s
ORDER BY is_target DESC, brand;

-- name: channel_visibility_expected
-- The same figures recomputed from the live views, per tracked brand: what the table must say.
SELECT b.brand,
       (SELECT count(*) FROM analytics.sample_facts f
         WHERE f.run_id = b.run_id AND f.channel = %(channel)s) AS samples,
       count(*) FILTER (WHERE f.mention_status = 'known') AS n,
       count(*) FILTER (WHERE f.mention_status = 'known' AND f.mentioned) AS mentions
FROM analytics.run_brands b
LEFT JOIN analytics.sample_brand_facts f
  ON f.run_id = b.run_id AND f.brand = b.brand AND f.channel = %(channel)s
WHERE b.run_id = %(run_id)s
GROUP BY b.run_id, b.brand ORDER BY b.brand;

-- name: duplicate_charges
-- More than one charge for the same upstream task, or for the same attempt (R24, R25).
SELECT coalesce(upstream_id, sample_id || ':' || attempt_no) AS charged_for,
       count(*) AS charges, sum(amount_minor)::bigint AS amount_minor
FROM geo.ledger_entries
WHERE run_id = %(run_id)s AND kind = 'charge'
GROUP BY coalesce(upstream_id, sample_id || ':' || attempt_no)
HAVING count(*) > 1
ORDER BY 1 LIMIT 1000;

-- name: unexplained_lines
-- Reconciliation lines whose difference nobody has explained. %(explained)s is THE predicate,
-- geo_pipeline.domain.billing.EXPLAINED (the summary, the gauge and the alert use it too).
-- difference_exact_minor: theirs exact (detail.cost_exact_minor where the vendor bills fractions
-- of a minor unit) - ours, per line; the check sums these and rounds once (domain round_minor).
SELECT upstream_id, sample_id, platform, classification, ours_minor, theirs_minor,
       difference_minor, currency,
       (coalesce((detail->>'cost_exact_minor')::numeric, theirs_minor) - ours_minor) AS difference_exact_minor
FROM geo.reconciliation_lines
WHERE run_id = %(run_id)s
  AND NOT (classification = ANY(%(explained)s::text[]))
ORDER BY upstream_id LIMIT 1000;

-- name: recent_runs
-- Runs created within the window, with the channels of their frozen snapshot (a partition per
-- channel) -- read from the snapshot, not by scanning samples. ``live_only`` keeps only the
-- runs still to dispatch: not cancelled. Scheduled runs are included: the re-sample job creates them and the sampling_plan sensor requests their
-- partitions, as for the launchpad job and the CLI.
SELECT r.run_id, r.monitor_id, r.scheduled_for, r.created_at, r.cancel_requested_at,
       ARRAY(SELECT DISTINCT (t ->> 'platform') || '__' || (t ->> 'device')
               FROM jsonb_array_elements(c.config -> 'targets') AS t ORDER BY 1) AS channels
FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
WHERE r.created_at >= now() - make_interval(days => %(days)s)
  AND (NOT %(live_only)s OR r.cancel_requested_at IS NULL)
ORDER BY r.created_at, r.run_id;

-- name: undispatched_pairs
-- Of the given (run, channel) pairs, those with a sample whose collect hint was never written
-- (sampling_plan has not dispatched the partition).
SELECT p.run_id, p.channel
FROM unnest(%(run_ids)s::text[], %(channels)s::text[]) AS p(run_id, channel)
WHERE EXISTS (
  SELECT 1 FROM geo.samples s
  WHERE s.run_id = p.run_id AND s.channel = p.channel
    AND s.collection_state = 'queued' AND s.attempt_no = 0
    AND NOT EXISTS (SELECT 1 FROM geo.outbox o
                     WHERE o.kind = 'collect' AND o.sample_id IS NULL AND o.run_id = s.run_id
                       AND o.channel = s.channel AND o.batch_no = s.batch_no)
    AND NOT EXISTS (SELECT 1 FROM geo.outbox o
                     WHERE o.sample_id = s.sample_id AND o.kind = 'collect'))
ORDER BY p.run_id, p.channel;

-- name: run_channels
-- The channels of the given runs, from their frozen snapshots.
SELECT r.run_id,
       ARRAY(SELECT DISTINCT (t ->> 'platform') || '__' || (t ->> 'device')
               FROM jsonb_array_elements(c.config -> 'targets') AS t ORDER BY 1) AS channels
FROM geo.runs r JOIN geo.config_snapshots c USING (snapshot_id)
WHERE r.run_id = ANY(%(run_ids)s::text[]);

-- name: runs_created
-- Creation time of the given run ids; missing ids are runs PostgreSQL does not know.
SELECT run_id, created_at FROM geo.runs WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: active_monitors
SELECT monitor_id, tenant_id, config FROM geo.monitors WHERE active ORDER BY monitor_id;

-- name: monitor_run_for_day
SELECT run_id FROM geo.runs WHERE monitor_id = %(monitor_id)s AND scheduled_for = %(day)s;

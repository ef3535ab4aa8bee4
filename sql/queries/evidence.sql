-- name: lock_sample
-- Serialises evidence recording per sample inside the caller's transaction, so revision numbers
-- are assigned one at a time without locking the sample row the lease machinery updates.
SELECT pg_advisory_xact_lock(hashtextextended('geo.evidence:' || %(sample_id)s, 0));

-- name: sample
SELECT sample_id, tenant_id, run_id, screenshot_policy, evidence_state, evidence_reason
  FROM geo.samples WHERE sample_id = %(sample_id)s;

-- name: latest_answer
SELECT revision, content_sha256, validity, validity_reason
  FROM geo.answers WHERE sample_id = %(sample_id)s
 ORDER BY revision DESC LIMIT 1;

-- name: insert_object
-- Content-addressed and idempotent: the same bytes of the same kind for the same sample are one
-- row (UNIQUE (sample_id, kind, sha256)); new bytes take the kind's next revision.
INSERT INTO geo.evidence_objects
  (sample_id, tenant_id, run_id, revision, kind, storage_key, sha256, size_bytes, mime_type,
   attempt_no, captured_at)
SELECT %(sample_id)s, %(tenant_id)s, %(run_id)s, coalesce(max(o.revision), 0) + 1, %(kind)s,
       %(storage_key)s, %(sha256)s, %(size_bytes)s, %(mime_type)s, %(attempt_no)s,
       %(captured_at)s
  FROM geo.evidence_objects o
 WHERE o.sample_id = %(sample_id)s AND o.kind = %(kind)s
ON CONFLICT (sample_id, kind, sha256) DO NOTHING
RETURNING object_id, revision;

-- name: has_kind
SELECT EXISTS (SELECT 1 FROM geo.evidence_objects
                WHERE sample_id = %(sample_id)s AND kind = %(kind)s) AS present;

-- name: sample_tenant
-- The authorisation check of R20: whose sample is it?
SELECT tenant_id FROM geo.samples WHERE sample_id = %(sample_id)s;

-- name: object_for
-- One object of a sample the caller's tenant owns; the newest revision when none is given.
SELECT o.object_id, o.sample_id, o.tenant_id, o.run_id, o.revision, o.kind, o.storage_key,
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at,
       -- a WARC-stored kind: its record's block digest (issue 33), checked on read
       (SELECT w.block_sha256 FROM geo.warc_records w
         WHERE w.sample_id = o.sample_id AND w.kind = o.kind AND w.payload_sha256 = o.sha256
           AND o.storage_key = w.object_key || '#' || w.record_offset || '-' || w.record_length
         LIMIT 1) AS block_sha256
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.sample_id = %(sample_id)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s AND o.kind = %(kind)s
   AND (%(revision)s::integer IS NULL OR o.revision = %(revision)s)
 ORDER BY o.revision DESC
 LIMIT 1;

-- name: object_by_key
-- A bundle's key is recorded once per part: ``kind`` picks the part (NULL: any, the whole object).
-- The key is found through its sample (no index on storage_key, migration 0071): a WARC
-- record's key '<object>#<offset>-<length>' through the record index, any other key
-- ({tenant}/{run}/{sample}/{revision}/{kind}, archive.object_key) through its sample segment.
SELECT o.object_id, o.sample_id, o.tenant_id, o.run_id, o.revision, o.kind, o.storage_key,
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at,
       -- a WARC-stored kind: its record's block digest (issue 33), checked on read
       (SELECT w.block_sha256 FROM geo.warc_records w
         WHERE w.sample_id = o.sample_id AND w.kind = o.kind AND w.payload_sha256 = o.sha256
           AND o.storage_key = w.object_key || '#' || w.record_offset || '-' || w.record_length
         LIMIT 1) AS block_sha256
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.sample_id = (CASE WHEN strpos(%(storage_key)s, '#') > 0 THEN
                         (SELECT w.sample_id FROM geo.warc_records w
                           WHERE w.object_key = split_part(%(storage_key)s, '#', 1)
                             AND w.record_offset::text
                                 = split_part(split_part(%(storage_key)s, '#', 2), '-', 1))
                       ELSE split_part(%(storage_key)s, '/', 3) END)
   AND o.storage_key = %(storage_key)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s AND (%(kind)s::text IS NULL OR o.kind = %(kind)s)
 ORDER BY o.object_id
 LIMIT 1;

-- name: objects_of_sample
SELECT o.object_id, o.sample_id, o.tenant_id, o.run_id, o.revision, o.kind, o.storage_key,
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at,
       -- a WARC-stored kind: its record's block digest (issue 33), checked on read
       (SELECT w.block_sha256 FROM geo.warc_records w
         WHERE w.sample_id = o.sample_id AND w.kind = o.kind AND w.payload_sha256 = o.sha256
           AND o.storage_key = w.object_key || '#' || w.record_offset || '-' || w.record_length
         LIMIT 1) AS block_sha256
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.sample_id = %(sample_id)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s
 ORDER BY o.kind, o.revision;

-- name: lock_samples
-- lock_sample for a whole completion batch, in one order (two batches never wait on each other
-- in a circle).
SELECT count(pg_advisory_xact_lock(hashtextextended('geo.evidence:' || k.sample_id, 0)))
  FROM (SELECT DISTINCT sample_id FROM unnest(%(sample_ids)s::text[]) AS u(sample_id)
         ORDER BY sample_id) k;

-- name: samples_for_record
-- What recording decides from, for a batch, read under the batch's lock (lock_samples): the
-- sample's owner and evidence layer, its latest answer revision, and its evidence object rows
-- as 'kind revision sha256' (recording numbers the next revisions, skips digests recorded
-- already and sees whether a screenshot is archived from them, then COPYs the new rows).
-- Read per sample (an ARRAY sublink probes the (sample_id, kind, revision) key): as an EXISTS
-- the planner could hash every screenshot row of the table once per batch (issue 33).
SELECT s.sample_id, s.tenant_id, s.run_id, s.screenshot_policy, s.evidence_state,
       s.evidence_reason, a.revision, a.content_sha256, a.validity,
       ARRAY(SELECT o.kind || ' ' || o.revision || ' ' || o.sha256 FROM geo.evidence_objects o
              WHERE o.sample_id = s.sample_id) AS objects
  FROM geo.samples s
  LEFT JOIN LATERAL (SELECT a1.revision, a1.content_sha256, a1.validity FROM geo.answers a1
                      WHERE a1.sample_id = s.sample_id
                      ORDER BY a1.revision DESC LIMIT 1) a ON true
 WHERE s.sample_id = ANY(%(sample_ids)s::text[]);

-- name: copy_answers
-- New answer revisions of a batch, in one statement; never updated later (R21). The caller
-- gives each row its sample's tenant (read under the batch's lock), so the per-row trigger
-- a_tenant_of_sample has nothing to look up (issue 33: the evidence rows' cost). COPY, not
-- INSERT ... FROM jsonb_to_recordset: about half the server's CPU a row (issue 33); the
-- statement-level guards with transition tables run for COPY as for INSERT.
COPY geo.answers
  (sample_id, tenant_id, revision, attempt_no, upstream_id, raw_text, sanitized_html,
   raw_sha256, content_sha256, captured_at, provider_truncated, validity, validity_reason,
   validity_rule_version, warnings, search_queries, web_search_used)
FROM STDIN;

-- name: copy_citations
-- With each row's tenant, as copy_answers; guard_citation_insert checks their answers.
COPY geo.citations
  (sample_id, tenant_id, revision, ordinal, citation_key, relation, raw_url, normalized_url,
   registrable_domain, title, span_start, span_end, cited_text)
FROM STDIN;

-- name: copy_objects
-- A batch's new evidence object rows: the caller numbered each kind's next revision and left
-- out digests its sample has already, from samples_for_record read under the batch's lock
-- (what insert_object's max(revision) + 1 and ON CONFLICT (sample_id, kind, sha256) DO
-- NOTHING decide, for a batch).
COPY geo.evidence_objects
  (sample_id, tenant_id, run_id, revision, kind, storage_key, sha256, size_bytes, mime_type,
   attempt_no, captured_at)
FROM STDIN;

-- name: reparse_candidates
-- Completed samples whose latest archived raw response can be parsed again: the given ids, or
-- every sample of a run whose evidence reason says the response was unparseable (R13).
SELECT s.sample_id, s.tenant_id, s.run_id, s.platform, s.device, s.region, s.mode,
       s.screenshot_policy, s.attempt_no, s.upstream_id, s.evidence_state, s.evidence_reason,
       o.storage_key, o.sha256, o.mime_type, o.attempt_no AS raw_attempt_no
  FROM geo.samples s
  JOIN LATERAL (SELECT o1.storage_key, o1.sha256, o1.mime_type, o1.attempt_no
                  FROM geo.evidence_objects o1
                 WHERE o1.sample_id = s.sample_id AND o1.kind = 'response_raw'
                 ORDER BY o1.revision DESC LIMIT 1) o ON true
 WHERE s.collection_state = 'completed'
   AND (s.sample_id = ANY(%(sample_ids)s::text[])
        OR (s.run_id = %(run_id)s AND s.evidence_reason ILIKE 'UNPARSEABLE%%'))
 ORDER BY s.sample_id;

-- name: set_evidence_state
-- The evidence layer after a re-parse, on a completed sample only (no worker holds it); the
-- transition trigger refuses moves R6 does not allow and logs the rest.
UPDATE geo.samples
   SET evidence_state = %(state)s, evidence_reason = %(reason)s
 WHERE sample_id = %(sample_id)s AND collection_state = 'completed'
   AND (evidence_state IS DISTINCT FROM %(state)s
        OR evidence_reason IS DISTINCT FROM %(reason)s);

-- name: displays_to_materialise
-- Answers of a run whose display is still derived from their text (sanitized_html = ''), in
-- key order after the last one seen (evidence.display.materialise_displays).
SELECT a.sample_id, a.revision, a.raw_text
  FROM geo.answers a JOIN geo.samples s ON s.sample_id = a.sample_id
 WHERE s.run_id = %(run_id)s AND a.sanitized_html = '' AND a.raw_text IS NOT NULL
   AND (a.sample_id, a.revision) > (%(after_sample)s, %(after_revision)s)
 ORDER BY a.sample_id, a.revision
 LIMIT %(limit)s;

-- name: materialise_displays
-- Store rendered displays; only rows still without one (a concurrent pass writes the same bytes).
UPDATE geo.answers a SET sanitized_html = r.html
  FROM jsonb_to_recordset(%(rows)s) AS r(sample_id text, revision int, html text)
 WHERE a.sample_id = r.sample_id AND a.revision = r.revision AND a.sanitized_html = '';

-- name: warc_objects_recorded
-- Which of a batch's WARC objects have index rows already (one index probe an object; a batch
-- has one object per tenant and run). A record is its (object, offset) and the object's key is
-- its bytes' digest, so a placement recorded again (a re-parse of the same answer, a re-claimed
-- screenshot with the same bytes) is in an object named here: its rows take insert_warc_records,
-- the rest copy_warc_records. Read under the batch's lock: a record belongs to one sample.
SELECT k.object_key FROM unnest(%(object_keys)s::text[]) AS k(object_key)
 WHERE EXISTS (SELECT 1 FROM geo.warc_records w WHERE w.object_key = k.object_key);

-- name: copy_warc_records
-- The index of a batch's WARC records (issue 33) in objects not indexed yet, one statement.
COPY geo.warc_records
  (object_key, record_offset, record_length, tenant_id, run_id, sample_id, record_type,
   record_id, target_uri, kind, mime_type, block_sha256, payload_sha256, payload_size,
   attempt_no, captured_at)
FROM STDIN;

-- name: insert_warc_records
-- The index rows of a batch's WARC records in objects that have index rows already
-- (warc_objects_recorded; the others take copy_warc_records), one statement. A record is its
-- (object, offset): written once; recording the same placement again adds nothing.
INSERT INTO geo.warc_records
  (object_key, record_offset, record_length, tenant_id, run_id, sample_id, record_type,
   record_id, target_uri, kind, mime_type, block_sha256, payload_sha256, payload_size,
   attempt_no, captured_at)
SELECT k.object_key, k.record_offset, k.record_length, k.tenant_id, k.run_id, k.sample_id,
       k.record_type, k.record_id, k.target_uri, k.kind, k.mime_type, k.block_sha256,
       k.payload_sha256, k.payload_size, k.attempt_no, k.captured_at
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(
       object_key text, record_offset bigint, record_length bigint, tenant_id text,
       run_id text, sample_id text, record_type text, record_id text, target_uri text,
       kind text, mime_type text, block_sha256 text, payload_sha256 text, payload_size bigint,
       attempt_no integer, captured_at timestamptz)
ON CONFLICT (object_key, record_offset) DO NOTHING;

-- name: run_tenant
SELECT tenant_id FROM geo.runs WHERE run_id = %(run_id)s;

-- name: run_objects_for_export
-- Every evidence object row of a run, in a stable order, with the record's block digest when
-- it is a WARC record (issue 33): what the WACZ export and `evidence verify` read.
SELECT o.sample_id, o.revision, o.kind, o.storage_key, o.sha256, o.size_bytes, o.mime_type,
       o.attempt_no, o.captured_at,
       (SELECT w.block_sha256 FROM geo.warc_records w
         WHERE w.sample_id = o.sample_id AND w.kind = o.kind AND w.payload_sha256 = o.sha256
           AND o.storage_key = w.object_key || '#' || w.record_offset || '-' || w.record_length
         LIMIT 1) AS block_sha256
  FROM geo.evidence_objects o
 WHERE o.run_id = %(run_id)s
 ORDER BY o.sample_id, o.revision, o.kind, o.object_id;

-- name: run_warc_records
-- The run's WARC records, by object and offset (the index, issue 33).
SELECT object_key, record_offset, record_length, record_type, kind, sample_id, block_sha256,
       payload_sha256, mime_type
  FROM geo.warc_records WHERE run_id = %(run_id)s
 ORDER BY object_key, record_offset;

-- name: answer_record_ids
-- The WARC record of each sample's latest upstream response (kind response_raw), the record a
-- late screenshot is concurrent to and a re-parse revision refers to (issue 33). Samples whose
-- response was stored before WARC have none.
SELECT DISTINCT ON (w.sample_id) w.sample_id, w.record_id
  FROM geo.warc_records w
 WHERE w.sample_id = ANY(%(sample_ids)s::text[]) AND w.kind = 'response_raw'
 ORDER BY w.sample_id, w.stored_at DESC, w.captured_at DESC, w.record_offset DESC;

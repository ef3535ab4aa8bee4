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

-- name: insert_answer
-- A new answer revision; earlier revisions are never updated (R21).
INSERT INTO geo.answers
  (sample_id, revision, attempt_no, upstream_id, raw_text, sanitized_html, raw_sha256,
   content_sha256, captured_at, provider_truncated, validity, validity_reason,
   validity_rule_version, warnings)
VALUES
  (%(sample_id)s, %(revision)s, %(attempt_no)s, %(upstream_id)s, %(raw_text)s,
   %(sanitized_html)s, %(raw_sha256)s, %(content_sha256)s, %(captured_at)s,
   %(provider_truncated)s, %(validity)s, %(validity_reason)s, %(validity_rule_version)s,
   %(warnings)s);

-- name: insert_citation
INSERT INTO geo.citations
  (sample_id, revision, ordinal, citation_key, relation, raw_url, normalized_url,
   registrable_domain, title, span_start, span_end, cited_text)
VALUES
  (%(sample_id)s, %(revision)s, %(ordinal)s, %(citation_key)s, %(relation)s, %(raw_url)s,
   %(normalized_url)s, %(registrable_domain)s, %(title)s, %(span_start)s, %(span_end)s,
   %(cited_text)s);

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
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.sample_id = %(sample_id)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s AND o.kind = %(kind)s
   AND (%(revision)s::integer IS NULL OR o.revision = %(revision)s)
 ORDER BY o.revision DESC
 LIMIT 1;

-- name: object_by_key
SELECT o.object_id, o.sample_id, o.tenant_id, o.run_id, o.revision, o.kind, o.storage_key,
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.storage_key = %(storage_key)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s
 ORDER BY o.object_id
 LIMIT 1;

-- name: objects_of_sample
SELECT o.object_id, o.sample_id, o.tenant_id, o.run_id, o.revision, o.kind, o.storage_key,
       o.sha256, o.size_bytes, o.mime_type, o.attempt_no, o.captured_at, o.stored_at
  FROM geo.evidence_objects o
  JOIN geo.samples s ON s.sample_id = o.sample_id
 WHERE o.sample_id = %(sample_id)s AND s.tenant_id = %(tenant_id)s
   AND o.tenant_id = %(tenant_id)s
 ORDER BY o.kind, o.revision;

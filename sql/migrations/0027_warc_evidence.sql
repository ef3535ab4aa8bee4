-- Evidence as web archives (issue 33, docs/design.md section 10). A completion batch's evidence
-- records are written as one gzip-per-record WARC object per tenant and run; this index table
-- addresses every record in it as (object key, offset, length), CDXJ-like, with the record's
-- type, id, target URI and its sha256 block and payload digests (a read checks both: a
-- mismatch is reported, never served, R20). geo.evidence_objects keeps one row per evidence
-- kind as before; for a WARC-stored kind its storage_key is '<object key>#<offset>-<length>'
-- and its sha256 the record's payload digest, so every existing reader reads it unchanged.
-- The request record (the exchange as sent) is indexed here only: it is no evidence kind of
-- geo.evidence_objects. Rows are only inserted (revisions are new records, R21) and deleted by
-- retention, which removes a run's objects whole.
CREATE TABLE geo.warc_records (
    object_key text NOT NULL,
    record_offset bigint NOT NULL CHECK (record_offset >= 0),
    record_length bigint NOT NULL CHECK (record_length > 0),
    tenant_id text NOT NULL,
    run_id text NOT NULL,
    sample_id text NOT NULL,
    record_type text NOT NULL CHECK (record_type IN ('request', 'response', 'resource', 'metadata')),
    record_id text NOT NULL,
    target_uri text NOT NULL,
    kind text NOT NULL,
    mime_type text NOT NULL,
    block_sha256 char(64) NOT NULL,
    payload_sha256 char(64) NOT NULL,
    payload_size bigint NOT NULL CHECK (payload_size >= 0),
    attempt_no integer,
    captured_at timestamptz NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (object_key, record_offset)
);
CREATE INDEX warc_records_run ON geo.warc_records (run_id);
CREATE INDEX warc_records_sample ON geo.warc_records (sample_id);

-- Tenancy as for geo.evidence_objects (0017): the service inserts and retention deletes;
-- analysts read their own tenant's rows only.
GRANT SELECT, INSERT, DELETE ON geo.warc_records TO geo_service;
GRANT SELECT ON geo.warc_records TO geo_analyst;
ALTER TABLE geo.warc_records OWNER TO geo_owner;
ALTER TABLE geo.warc_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY analyst_tenant ON geo.warc_records FOR SELECT TO geo_analyst
  USING (tenant_id = (SELECT geo.analyst_tenant()));

-- Re-parse revisions as WARC (issue 33): the answer text a fixed parser read out of a kept
-- response is a 'conversion' record (WARC 1.1 section 6.8) that refers to the response record
-- (WARC-Refers-To), so the index table takes that record type too.
ALTER TABLE geo.warc_records DROP CONSTRAINT warc_records_record_type_check;
ALTER TABLE geo.warc_records ADD CONSTRAINT warc_records_record_type_check
  CHECK (record_type IN ('request', 'response', 'resource', 'metadata', 'conversion'));

-- Evidence (issue 5). geo.answers.content_sha256 fingerprints one answer revision (text,
-- citations, provider truncation flag) so that recording the same evidence twice adds nothing;
-- storage_key is indexed because authorised access by key looks the key up before any read (R20).
ALTER TABLE geo.answers ADD COLUMN content_sha256 char(64);
CREATE INDEX evidence_objects_storage_key ON geo.evidence_objects (storage_key);

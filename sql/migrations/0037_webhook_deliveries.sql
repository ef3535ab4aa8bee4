-- Callbacks of answer-scraping services (issue 31): cloro POSTs a task on its terminal state and
-- redelivers at least once, each time with a new delivery id, so deliveries are deduplicated by
-- the upstream task id (one row per task), counted, and acted on once: a sample waiting for
-- review because cloro holds its task under our key but never said which (409,
-- accepted_upstream:id_unknown) learns the id and is queued to follow it. Polling stays the
-- safety net: a lost callback delays, never loses. Operator data: no tenant column.
CREATE TABLE geo.webhook_deliveries (
  platform          text NOT NULL,
  upstream_id       text NOT NULL,
  idempotency_key   text,
  status            text,
  deliveries        integer NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
  first_received_at timestamptz NOT NULL DEFAULT now(),
  last_received_at  timestamptz NOT NULL DEFAULT now(),
  outcome           text NOT NULL DEFAULT '',
  PRIMARY KEY (platform, upstream_id)
);
GRANT SELECT, INSERT, UPDATE ON geo.webhook_deliveries TO geo_service;
ALTER TABLE geo.webhook_deliveries OWNER TO geo_owner;

-- Collect hints per (batch, channel) instead of per sample (issues 2 and 4). A hint only wakes
-- a worker's lane (PostgreSQL decides what is due and fair), so one row per batch and channel
-- does what one row per sample did: a 100,000-sample run queues ~2,000 outbox rows, stream
-- entries and acks instead of 100,000. Hints naming one sample (lease expired, operator
-- verdicts, the sweeper) keep sample_id; batch hints have sample_id NULL and name the batch.
ALTER TABLE geo.outbox ADD COLUMN batch_no integer, ADD COLUMN channel text;
-- "Has this (run, channel, batch) a hint, and since when?": dispatch and the sweeper ask it.
CREATE INDEX outbox_collect_batches ON geo.outbox (run_id, channel, batch_no, created_at)
  WHERE kind = 'collect' AND sample_id IS NULL;

-- Accepted samples waiting in the queue (a deferred poll, a hand-back, a dead worker's lease)
-- are claimed in the order of their fetch deadline (issue 31): a service keeps a result only so
-- long (cloro 24 h, DataForSEO and Bright Data 30 days), and within one platform the earliest
-- accepted task is the one whose result expires first. The claim's third candidate branch
-- (execution.claim_candidates) reads this index instead of every queued sample of the tenant.
CREATE INDEX samples_queued_accepted ON geo.samples (tenant_id, platform, accepted_at)
  WHERE collection_state = 'queued' AND submission_state = 'accepted';

-- The sweeper re-queues screenshot downloads whose hint Redis lost (issue 4): it looks for
-- completed samples whose required screenshot is still pending. Only those are indexed.
CREATE INDEX samples_screenshot_pending ON geo.samples (completed_at)
  WHERE evidence_reason = 'SCREENSHOT_PENDING';

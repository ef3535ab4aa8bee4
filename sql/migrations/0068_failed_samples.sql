-- A sample whose collection failed (no answer stored) was counted in analysing_samples: the
-- mention table read "still analysing 1" beside a channel whose collection said failed 1 and
-- analysing false (issue #34, a newcomer's sixth read). It has its own column now, so the
-- columns still add up: samples = n + invalid_samples + analysing_samples + review_samples +
-- failed_samples (analysing_samples no longer holds a failed collection).
ALTER TABLE analytics.brand_metrics
  ADD COLUMN failed_samples integer NOT NULL DEFAULT 0;
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN failed_samples integer NOT NULL DEFAULT 0;

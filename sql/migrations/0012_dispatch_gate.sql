-- A (run, channel) is worked on only once it is dispatched (issue 8: the sampling_plan asset
-- checks a partition's share of the plan, then dispatches it; a partition failing its checks
-- is never executed, R2/R3). Until now dispatch only queued wake-up hints: a confirmed run's
-- samples were claimable at once and the sweeper hinted them, checked or not.
CREATE TABLE geo.run_dispatches (
  run_id        text NOT NULL REFERENCES geo.runs ON DELETE CASCADE,
  channel       text NOT NULL,
  dispatched_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, channel)
);
-- What was dispatched or worked on before this migration stays so.
INSERT INTO geo.run_dispatches (run_id, channel)
SELECT DISTINCT s.run_id, s.channel
FROM geo.samples s
WHERE s.attempt_no > 0 OR s.collection_state <> 'queued'
   OR EXISTS (SELECT 1 FROM geo.outbox o
               WHERE o.kind = 'collect'
                 AND (o.sample_id = s.sample_id
                      OR (o.sample_id IS NULL AND o.run_id = s.run_id AND o.channel = s.channel)))
ON CONFLICT DO NOTHING;

-- Priors for the repeats planner. Loaded as Q("planning.<name>").

-- name: prior_counts
-- Per channel x question: the target brand's mentions and n over a monitor's latest runs (at
-- most %(last_runs)s runs), from the analyst table of one question per row.
WITH recent AS (
  SELECT r.run_id FROM geo.runs r
   WHERE r.monitor_id = %(monitor_id)s AND r.scheduled_for IS NOT NULL
   ORDER BY r.scheduled_for DESC, r.run_id DESC
   LIMIT %(last_runs)s
)
SELECT m.channel, m.question_revision, sum(m.mentions)::int AS mentions, sum(m.n)::int AS n
  FROM analytics.brand_metrics m JOIN recent USING (run_id)
 WHERE m.is_target
 GROUP BY m.channel, m.question_revision
HAVING sum(m.n) > 0
 ORDER BY m.channel, m.question_revision;

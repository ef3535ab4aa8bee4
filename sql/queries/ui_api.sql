-- Scraped vs API apart (issue 31, migration 0054): how each platform of a run was collected,
-- and the run's fan-out, citation gap and UI-vs-API agreement as the analytics views compute
-- them. Every report, export and the Dagster metadata read these, never a formula of their own.

-- name: freeze_run_platforms
-- The access and engine of each platform of a run, as the registry says when the run is made
-- (R2); a platform already recorded keeps what was frozen first.
INSERT INTO geo.run_platforms (run_id, tenant_id, platform, access, engine)
SELECT %(run_id)s, %(tenant_id)s, k.platform, k.access, k.engine
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS k(platform text, access text, engine text)
ON CONFLICT (run_id, platform) DO NOTHING;

-- name: unfrozen_platforms
-- The platforms of a run's samples with no frozen access (runs created before 0054).
SELECT r.tenant_id, s.platform
  FROM (SELECT DISTINCT platform FROM geo.samples WHERE run_id = %(run_id)s) s
  JOIN geo.runs r ON r.run_id = %(run_id)s
 WHERE NOT EXISTS (SELECT 1 FROM geo.run_platforms p
                    WHERE p.run_id = %(run_id)s AND p.platform = s.platform);

-- name: channel_access
-- Each channel of a run with the access and engine frozen for its platform.
SELECT s.channel, coalesce(p.access, 'unknown') AS access, coalesce(p.engine, s.platform) AS engine
  FROM (SELECT DISTINCT channel, platform FROM geo.samples WHERE run_id = %(run_id)s) s
  LEFT JOIN geo.run_platforms p ON p.run_id = %(run_id)s AND p.platform = s.platform
 ORDER BY s.channel;

-- name: fan_out
-- analytics.fan_out of a run (per channel x question), channel NULL = every channel.
SELECT channel, access, engine, question_index, answers, answers_searched, answers_not_searched,
       answers_search_unknown, share_searched, queries, distinct_queries, mentions_searched,
       mentions_not_searched
  FROM analytics.fan_out
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
 ORDER BY channel, question_index;

-- name: fan_out_channels
-- analytics.fan_out_channels of a run (per channel).
SELECT channel, access, engine, questions, answers, answers_searched, share_searched,
       share_searched_lower, share_searched_upper, share_searched_interval,
       share_searched_n_effective, queries, distinct_queries, queries_per_answer,
       answers_not_searched, answers_search_unknown, mentions_searched, mention_rate_searched,
       mentions_not_searched, mention_rate_not_searched
  FROM analytics.fan_out_channels
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
 ORDER BY channel;

-- name: citation_gap
-- analytics.citation_gap of a run: the most-cited gap domains first.
SELECT channel, access, engine, domain, n, cited_with_competitor, cited_with_competitor_share,
       questions, competitors
  FROM analytics.citation_gap
 WHERE run_id = %(run_id)s AND (%(channel)s::text IS NULL OR channel = %(channel)s)
 ORDER BY channel, cited_with_competitor DESC, domain;

-- name: agreement
-- analytics.ui_api_agreement of a run; with a channel, the pairs it takes part in.
SELECT engine, ui_channel, ui_access, api_channel, questions, ui_answers, api_answers, pairs,
       agreeing_pairs, agreement, agreement_lower, agreement_upper, agreement_interval,
       n_effective, rank_questions, rank_pairs, rank_agreeing_pairs, rank_agreement,
       rank_agreement_lower, rank_agreement_upper, rank_agreement_interval, rank_n_effective
  FROM analytics.ui_api_agreement
 WHERE run_id = %(run_id)s
   AND (%(channel)s::text IS NULL OR ui_channel = %(channel)s OR api_channel = %(channel)s)
 ORDER BY engine, ui_channel, api_channel;

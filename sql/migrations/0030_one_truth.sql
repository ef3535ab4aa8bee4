-- One truth for every number (issue #34).
--
-- One change-flag rule: analytics.brand_changes (each question one cluster, Benjamini-Hochberg
-- across the day's brand x channel family). analytics.brand_day_over_day flagged a change when
-- the plain two-proportion z on the raw n passed 1.96 -- every test on its own at 5 %, so with a
-- dozen brand x channel tests a day a false "significant" change most weeks -- and its column
-- `significant` read like the answer. It is dropped so it cannot be mistaken; the alert sensor and
-- the analyst doc read analytics.brand_changes (`flagged`, `q_value`).
DROP VIEW analytics.brand_day_over_day;

-- One mention-rate interval for analysts. In analytics.channel_brand_metrics the columns
-- mention_rate_lower/upper held the plain Wilson interval (answers as independent) while the
-- same names in analytics.brand_trends held the question-clustered one. Now the same name means
-- the same thing everywhere: mention_rate_lower/upper is THE interval (clustered by question
-- wherever more than one question is pooled; with one question it is Wilson, the two coincide),
-- the plain Wilson bounds are named as such, and mention_rate_interval says which method a row's
-- interval used (n_effective beside it). Renaming keeps the stored values and the column grants.
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_lower TO mention_rate_wilson_lower;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_upper TO mention_rate_wilson_upper;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_cluster_lower TO mention_rate_lower;
ALTER TABLE analytics.channel_brand_metrics
  RENAME COLUMN mention_rate_cluster_upper TO mention_rate_upper;
ALTER TABLE analytics.channel_brand_metrics
  ADD COLUMN mention_rate_interval text GENERATED ALWAYS AS (
    CASE WHEN questions IS NULL THEN NULL
         WHEN questions >= 2 THEN 'question-clustered, ' || questions || ' questions'
         ELSE 'Wilson, 1 question' END) STORED;

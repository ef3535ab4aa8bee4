-- One truth for every number (issue #34).
--
-- One change-flag rule: analytics.brand_changes (each question one cluster, Benjamini-Hochberg
-- across the day's brand x channel family). analytics.brand_day_over_day flagged a change when
-- the plain two-proportion z on the raw n passed 1.96 -- every test on its own at 5 %, so with a
-- dozen brand x channel tests a day a false "significant" change most weeks -- and its column
-- `significant` read like the answer. It is dropped so it cannot be mistaken; the alert sensor and
-- the analyst doc read analytics.brand_changes (`flagged`, `q_value`).
DROP VIEW analytics.brand_day_over_day;

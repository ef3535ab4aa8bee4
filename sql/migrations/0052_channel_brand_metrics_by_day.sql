-- The analyst's "mention rate over the last N days of a monitor" (and the brand dashboard's)
-- read every day of the monitor's history: analytics.channel_brand_metrics's index
-- (monitor_id, channel, brand, scheduled_for) puts the day after channel and brand, so a window
-- of days over every channel x brand scans each pair's whole history (issue 39; the same gap
-- 0034 closed on share_of_voice). Measured (test_analyst_query_growth.py, 30 days asked):
-- 9 buffers over 60 days of history, 97 over 600 before; with this index 10x the history reads
-- at most an index level more.
CREATE INDEX channel_brand_metrics_monitor_day
  ON analytics.channel_brand_metrics (monitor_id, scheduled_for);

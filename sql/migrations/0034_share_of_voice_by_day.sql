-- The analyst's "share of voice over the last N days of a monitor" (and the dashboard's) found
-- its rows by reading the whole table: analytics.share_of_voice had only its primary key, which
-- starts with run_id (issue 39). Measured on a 100,000-sample history: 817 -> 67 buffers; the
-- work is now the days asked for, whatever the history's length.
CREATE INDEX share_of_voice_monitor_day ON analytics.share_of_voice (monitor_id, scheduled_for);

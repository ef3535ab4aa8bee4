-- The transition log pairs a statement's old and new sample rows by hash or merge join, never
-- by a nested loop over the two transition tables (issue 33: the S3 row's database share).
-- log_sample_transitions joins old_samples to new_samples twice (the check, the INSERT). A
-- PL/pgSQL statement is planned once per session and kept, and a transition table is
-- estimated at the row count of the call that planned it: a worker's connection whose first
-- UPDATE of geo.samples moved one sample kept a nested loop for the rest of its life, n x n
-- comparisons a statement (auto_explain of an 80-sample UPDATE: 6,320 rows removed by the
-- join filter, 1.1 ms of each join). Every batched UPDATE of samples pays it -- claims, sends,
-- acceptances, finishes (the S3 row's completion batches are larger: median 78 against 58),
-- lease renewals of thousands. perf of the backends of a bench/throughput.py --mode http row:
-- the two joins 0.116 ms a sample with S3 evidence, 0.064 with it off. Backend CPU of one
-- UPDATE of n samples with a transition each, per sample (us; alternated, min of 2 rounds,
-- load 9): n = 80: 59 -> 29, 110: 64 -> 28, 300: 109 -> 26, 1,500: 444 -> 24; n = 1 and 10
-- unchanged (369 / 366, 62 / 59).
-- The function's body is unchanged (the same rows in the same order, the same checks and
-- errors); only how its statements are planned:
--   * enable_nestloop off while it runs, so the old/new join is a hash or merge join whatever
--     the estimate (the LATERAL VALUES stays a nested loop: it is the only way to run it);
--   * jit off while it runs: a disabled nested loop is priced at 1e10, which would otherwise
--     JIT-compile these statements (~480 ms a statement when tried);
--   * reopen_run_retention, which its INSERT fires and which would be planned under those
--     settings on its first call, plans with enable_nestloop on, as before (an index probe of
--     geo.runs per distinct run, never a scan of geo.runs).
-- A function's SET clause holds only while the function runs (restored on exit), so nothing
-- else in the transaction sees these settings.
ALTER FUNCTION geo.log_sample_transitions() SET enable_nestloop = off;
ALTER FUNCTION geo.log_sample_transitions() SET jit = off;
ALTER FUNCTION geo.reopen_run_retention() SET enable_nestloop = on;

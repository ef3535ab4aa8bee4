-- Which queued samples may be claimed, written once. The candidates' read (both of its
-- branches), the claim itself and the sweeper's re-hints each used to spell it out, and a rule
-- kept in four places drifts. A sample is claimable when:
--   its run is confirmed (the reservation is taken) and its (run, channel) was dispatched (the
--   partition passed its checks);
--   a cancelled run gets no new submission: only a sample already submitted is followed on;
--   an uncertain sample only where its platform can look a task up (recovery asks the platform
--   whether the request arrived; where it cannot, an operator decides). lookup_platforms NULL:
--   the caller names the samples itself and has decided that.
-- One row when claimable, none otherwise; used as "CROSS JOIN LATERAL geo.claimable(...)".
-- A set-returning LANGUAGE sql function, STABLE (it reads tables), not STRICT, not SECURITY
-- DEFINER, one SELECT: the planner inlines it into the calling query, so the per-tenant index
-- scans with their LIMIT, the run lookup and the dispatch probe plan exactly as when written
-- inline (a scalar function would not be inlined, having subqueries, and would run once per row).
-- The dispatch check is a join, not an EXISTS: at most one row (primary keys), and inlined as a
-- join it is probed through the primary key; an EXISTS on the caller's columns would be hashed
-- over the whole table on every claim.
CREATE FUNCTION geo.claimable(run_id text, channel text, platform text, submission_state text,
                              lookup_platforms text[])
RETURNS SETOF boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT true
  FROM geo.runs r JOIN geo.run_dispatches d ON d.run_id = r.run_id
  WHERE r.run_id = claimable.run_id AND d.channel = claimable.channel
    AND r.confirmed_at IS NOT NULL
    AND (r.cancel_requested_at IS NULL OR claimable.submission_state <> 'planned')
    AND (claimable.submission_state <> 'uncertain' OR claimable.lookup_platforms IS NULL
         OR claimable.platform = ANY(claimable.lookup_platforms))
$$;
-- geo_owner owns every object of the schema (0017); migrations may run as a superuser.
ALTER FUNCTION geo.claimable(text, text, text, text, text[]) OWNER TO geo_owner;

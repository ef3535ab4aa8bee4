-- The identity rule of 0051, the same id for every input at less cost (issue 39): the hex of
-- the digest's first 12 bytes IS the first 24 hex digits of the hex of all 32, so the rule
-- encodes 12 bytes and no longer cuts 24 characters off a 64-character text (left() on a text
-- of a multibyte database encoding counts characters). The rule alone over 100,000 identities
-- (backend CPU, least of 11): 104 -> 91 ms, of which SHA-256 is ~59 and concat_ws ~20 (a ||
-- chain costs the same, and would turn a NULL part's id NULL); convert_to stays (~9 ms): it
-- hashes the UTF-8 bytes Python hashes in a database of any encoding. In the COPY of a 100k run
-- (bench/sample_insert_costs.py, medians of 5/3/7 at load 4.5-6) the check costs 0.08-0.14 s;
-- the old rule measured 0.03-0.09 s more, at that load's noise.
-- Still THE rule of geo_pipeline.domain.plan.sample_id_for (tests: test_sample_insert_cost's
-- test_the_sql_rule_is_the_python_rule and test_the_sql_rule_is_the_python_rule_on_any_text);
-- the check sample_id_is_identity_hash calls it by name, so its definition -- and with it
-- geo.sample_id_check_in_force() -- is unchanged, and no stored id needs checking again.
CREATE OR REPLACE FUNCTION geo.sample_id_for(run_id text, question_revision text, platform text,
  device text, region text, mode text, repeat_index integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT 's' || encode(substr(sha256(convert_to(concat_ws(chr(31), run_id, question_revision,
    platform, device, region, mode, repeat_index::text), 'UTF8')), 1, 12), 'hex')
$$;

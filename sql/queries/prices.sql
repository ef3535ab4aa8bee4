-- Versioned price lists (R4, R23): migration 0020.

-- name: insert_price_version
-- Idempotent by (platform, version): the same list imported twice is one row; the caller
-- compares content_sha256 to refuse a changed list under an existing name.
INSERT INTO geo.price_versions (platform, version, effective_from, currency, prices, source,
                                content_sha256)
VALUES (%(platform)s, %(version)s, %(effective_from)s, %(currency)s, %(prices)s, %(source)s,
        %(content_sha256)s)
ON CONFLICT DO NOTHING
RETURNING platform, version;

-- name: price_version
SELECT platform, version, effective_from, currency, prices, source, content_sha256, imported_at
FROM geo.price_versions WHERE platform = %(platform)s AND version = %(version)s;

-- name: price_version_at
-- The version another list already holds at this instant (a clash of effective dates).
SELECT version FROM geo.price_versions
WHERE platform = %(platform)s AND effective_from = %(effective_from)s;

-- name: list_price_versions
SELECT platform, version, effective_from, currency, prices, source, content_sha256, imported_at
FROM geo.price_versions
WHERE %(platform)s::text IS NULL OR platform = %(platform)s
ORDER BY platform, effective_from;

-- name: effective_price_versions
-- Per platform, the list in effect at %(at)s (database time when NULL): the latest that has
-- taken effect. Platforms with none keep the registry's static prices.
SELECT DISTINCT ON (platform) platform, version, effective_from, currency, prices, source
FROM geo.price_versions
WHERE effective_from <= coalesce(%(at)s::timestamptz, now())
ORDER BY platform, effective_from DESC;

-- name: run_charge_versions
-- The price version and mode each charge of a run was priced with (its frozen quote's).
SELECT upstream_id, price_version, details->>'mode' AS mode
FROM geo.ledger_entries
WHERE run_id = %(run_id)s AND kind = 'charge' AND upstream_id IS NOT NULL;

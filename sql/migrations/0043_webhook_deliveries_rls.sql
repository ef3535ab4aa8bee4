-- geo.webhook_deliveries (0037) is operator data like geo.account_sends: row-level security on
-- (no policy, so a login that is neither the owner nor the service sees nothing), as the tenancy
-- isolation test requires of every table in the geo schema.
ALTER TABLE geo.webhook_deliveries ENABLE ROW LEVEL SECURITY;

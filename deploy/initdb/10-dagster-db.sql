-- Dagster's instance storage lives in its own database on the same server (DAGSTER_PG_DB).
CREATE DATABASE dagster;

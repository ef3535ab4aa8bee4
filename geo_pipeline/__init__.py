"""geo_pipeline: GEO monitoring backend.

The data path: config -> plan (domain) -> PostgreSQL (store) -> Redis Streams (streams) -> workers
(worker) -> engines (connectors) -> evidence -> analysis -> billing, with Dagster (defs) as the
orchestration shell around it.
"""

__version__ = "0.1.0"

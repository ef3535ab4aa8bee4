"""The Dagster shell around the pipeline (docs/design.md section 5), by domain:

- ``collection/``: sampling_plan and collection_results with their checks, the launchpad's jobs
  (create and plan a run), the daily re-sampling of monitors, the sampling_plan and completion
  sensors;
- ``evidence/``: validated_evidence and its checks;
- ``analysis/``: brand_analysis and brand_visibility with their checks and metadata;
- ``billing/``: billing_reconciliation and its checks;
- ``operations/``: the retention pass (asset, job, schedule), the partition retention sensor,
  the alerts sensor.

Shared by them, at this level: ``names`` (every key and check name), ``partitions``,
``resources``, ``pools``, ``factory`` (the arguments every pipeline asset shares, and the
check results' shape), ``jobs`` (the asset jobs the sensors launch, and the run tags),
``launchpad`` (the typed form) and ``markdown``. A domain imports the shared modules, never
another domain (the asset jobs select by key, so a sensor needs no asset module).

This package is the project's defs folder ([tool.dg] in pyproject.toml):
``geo_pipeline.definitions`` loads it with ``dg.load_from_defs_folder``, which imports every
module here and deploys every asset, asset check, job, sensor and schedule found at module level
(an object imported into a second module is the same object and counts once; two different
objects under one name fail the load). So a module-level definition here is deployed without
being listed anywhere; keep helpers as functions, classes or constants. Resources are the
exception: they read the environment and are added by ``geo_pipeline.definitions`` (never a
module-level resource instance here).
Nothing here executes samples — workers do (principle 4: one partition = one run's channel).
"""

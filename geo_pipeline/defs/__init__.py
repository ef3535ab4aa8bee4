"""The Dagster shell around the pipeline (docs/design.md section 5): resources, partitions,
assets with their checks, the run-creation job, sensors and schedules.

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

"""The Dagster shell around the pipeline (docs/design.md section 5): resources, partitions,
assets with their checks, the run-creation job, sensors and schedules.
``geo_pipeline.definitions`` assembles them; nothing here executes samples — workers do
(principle 4: one partition = run x channel)."""

"""Shared fixtures: real services, found by one rule (geo_pipeline.runtime.services)."""

pytest_plugins = [
    "geo_pipeline_tests.fixtures.postgres",
    "geo_pipeline_tests.fixtures.redis",
    "geo_pipeline_tests.fixtures.s3",
    "geo_pipeline_tests.fixtures.simulator",
]

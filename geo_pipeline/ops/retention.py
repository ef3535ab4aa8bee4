"""Retention (D9) for the operator's ``geo-pipeline retention`` command. The pass itself lives in
geo_pipeline.flows.retention, where the Dagster schedule (geo_pipeline.defs.retention) reaches it
too; this module keeps the operator tools' import path."""

from __future__ import annotations

from geo_pipeline.flows.retention import (
    RetentionReport,
    RunRetention,
    TableWindows,
    apply_retention,
    database_now,
    delete_object,
)

__all__ = [
    "RetentionReport",
    "RunRetention",
    "TableWindows",
    "apply_retention",
    "database_now",
    "delete_object",
]

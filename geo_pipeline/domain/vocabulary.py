"""The closed sets of words a person types into the CLI: review verdicts, evidence kinds, export
formats. Defined here, in a module that imports nothing, and imported by the parts that act on
them (analysis/review.py, evidence/access.py, ops/export.py): parsing a command's arguments, or
printing its ``--help`` with the choices, then needs no heavy import (issue 30)."""

from __future__ import annotations

# A person's decision on a sample in the review queue (analysis/review.py).
REVIEW_VERDICTS = ("accepted", "failed", "valid", "invalid")

# The evidence a sample can have (evidence/access.py).
EVIDENCE_KINDS = (
    "answer_raw",
    "answer_html",
    "citations",
    "response_raw",
    "screenshot",
    "thumbnail",
    # A browser capture's page as rendered (kept, never rendered by us) and how it was captured.
    "page_html",
    "capture",
)

# What `geo-pipeline report export` writes (ops/export.py).
EXPORT_FORMATS = ("json", "csv", "html")

# How `samples resolve --run RUN --policy P` settles a run's uncertain samples
# (store/bulk_resolution.py, which maps each to its query and verdict).
BULK_POLICIES = ("accept-possible-second-charge", "give-up")

# The alert kinds a tenant's recipient can subscribe to (observability/tenant_routing.py).
TENANT_ALERT_KINDS = ("mention_change", "resample_failed", "reconciliation", "stuck_partition")

# The container image `deploy render` names unless told otherwise (ops/deploy_render.py).
DEFAULT_IMAGE = "geo-pipeline:0.1.0"

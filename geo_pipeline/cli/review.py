"""CLI commands of this part of the pipeline (filled in by the issue that owns it)."""

from __future__ import annotations

import click


def register(root: click.Group) -> None:
    """Add this module's commands to the root group."""
    del root

"""``geo-pipeline connectors check [PLATFORM ...] [--json]``: one cheap, real request per
configured engine -- auth, model availability, web search used, latency, parsed citations.

Without PLATFORM: every platform that names a key variable (the real engines); ``--all`` adds
the others (the simulator's). A platform whose key variable is not set is skipped, naming the
variable. Exit 1 when a checked platform failed or nothing could be checked.
"""

from __future__ import annotations

import click

from geo_pipeline.cli.output import emit_json, emit_table

COLUMNS = [
    "platform",
    "status",
    "auth",
    "model",
    "model_available",
    "mode",
    "web_search_used",
    "citations",
    "retrieved",
    "latency_ms",
    "detail",
]


@click.group("connectors")
def connectors_group() -> None:
    """The engines of the connector registry."""


def _check_question() -> str:
    """The default question, read when the command runs (connectors.check imports httpx)."""
    from geo_pipeline.connectors import check as checkmod

    return checkmod.CHECK_QUESTION


@connectors_group.command("check")
@click.argument("platforms", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Also the platforms that need no key.")
@click.option("--mode", default=None, help="Ask in this mode (default: web_search if offered).")
@click.option(
    "--question",
    default=_check_question,
    show_default=False,
    help="The question to ask (default: a short one that invites a cited search).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(1, 900),
    default=300.0,
    show_default=True,
    help="Seconds to wait for each answer.",
)
@click.option("--json", "as_json", is_flag=True)
def check_cmd(
    platforms: tuple[str, ...],
    every: bool,
    mode: str | None,
    question: str,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Send one cheap, real request to each configured platform (the vendor bills it) and
    report auth, model availability, web search used, latency and the citations parsed."""
    import asyncio

    from geo_pipeline.connectors import check as checkmod
    from geo_pipeline.connectors.registry import load_registry

    entries = checkmod.targets(load_registry(), platforms, every)
    build: checkmod.ConnectorBuilder = checkmod.factory_connector
    if any(e.protocol == "browser" for e in entries):
        from geo_pipeline.store.db import database_url
        from geo_pipeline.worker.browser import check_connector_builder

        build = check_connector_builder(database_url())
    results = asyncio.run(
        checkmod.check_platforms(
            entries, mode=mode, question=question, timeout_s=timeout_s, build=build
        )
    )
    bad = checkmod.failed(results)
    if as_json:
        emit_json({"ok": not bad, "platforms": [r.as_dict() for r in results]})
    else:
        if results:
            emit_table([r.as_dict() for r in results], COLUMNS, title="connectors check")
        if not any(r.status == "ok" for r in results):
            click.echo(
                "error: no platform was checked"
                + ("" if results else " (none names a key variable; name one, or use --all)"),
                err=True,
            )
    if bad:
        raise SystemExit(1)


def register(root: click.Group) -> None:
    root.add_command(connectors_group)

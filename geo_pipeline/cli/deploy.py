"""``geo-pipeline deploy render``: the worker Deployments and KEDA ScaledObjects for every
enabled platform of the connector registry, real engines included (issue 37)."""

from __future__ import annotations

from pathlib import Path

import click

from geo_pipeline.domain.vocabulary import DEFAULT_IMAGE


@click.group("deploy")
def deploy_group() -> None:
    """Deployment files generated from the registry."""


@deploy_group.command("render")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write worker.yaml and keda-scaledobject.yaml into this directory (default: print).",
)
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    help="Also render this registered platform (e.g. a real engine whose key is only in the "
    "cluster's Secret). Repeatable.",
)
@click.option("--all-registered", is_flag=True, help="Every registered platform.")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True)
@click.option("--max-replicas", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option(
    "--backlog-per-replica", type=click.IntRange(1, 1_000_000), default=500, show_default=True
)
def render_cmd(
    out: Path | None,
    platforms: tuple[str, ...],
    all_registered: bool,
    image: str,
    max_replicas: int,
    backlog_per_replica: int,
) -> None:
    """One worker Deployment and one ScaledObject per enabled platform (its key set here, or a
    simulator), plus those named by --platform."""
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.ops.deploy_render import RenderError, RenderOptions, render, select_platforms

    try:
        entries = select_platforms(load_registry(), platforms, all_registered)
    except RenderError as exc:
        raise click.ClickException(str(exc)) from None
    files = render(
        entries,
        RenderOptions(
            image=image, max_replicas=max_replicas, backlog_per_replica=backlog_per_replica
        ),
    )
    if out is None:
        click.echo("---\n".join(files.values()), nl=False)
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    click.echo(f"wrote {', '.join(files)} to {out} for {len(entries)} platform(s): "
               f"{', '.join(e.platform for e in entries)}")  # fmt: skip


def register(root: click.Group) -> None:
    root.add_command(deploy_group)

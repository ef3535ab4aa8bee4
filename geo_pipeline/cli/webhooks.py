"""``geo-pipeline webhooks serve``: the receiver of answer-scraping services' callbacks
(geo_pipeline.worker.webhooks), one small HTTP process started like the relay and the worker."""

from __future__ import annotations

import click


@click.group("webhooks")
def webhooks_group() -> None:
    """Callbacks of answer-scraping services (cloro, DataForSEO, Bright Data), verified and
    settled once per task."""


@webhooks_group.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8790, show_default=True)
def serve_cmd(host: str, port: int) -> None:
    """Serve POST /webhooks/cloro/<secret>, GET|POST /webhooks/dataforseo/<secret>, POST
    /webhooks/brightdata/<secret> and GET /healthz. The secret is the deployment's
    GEO_WEBHOOK_SECRET; the services are told the URLs through GEO_CLORO_WEBHOOK_URL,
    GEO_DATAFORSEO_PINGBACK_URL and GEO_BRIGHTDATA_NOTIFY_URL (docs/service-callbacks.md)."""
    from aiohttp import web

    from geo_pipeline.worker.webhooks import SECRET_ENV, create_app

    try:
        app = create_app()
    except ValueError as exc:
        raise click.ClickException(f"{exc} (set {SECRET_ENV})") from exc
    web.run_app(app, host=host, port=port, print=lambda *_: None)


def register(root: click.Group) -> None:
    root.add_command(webhooks_group)

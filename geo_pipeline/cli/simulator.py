"""``geo-pipeline simulator``: run the platform simulator as its own HTTP process.

Prints one line when the socket listens — ``simulator listening on URL`` or, with ``--json``,
``{"url": ...}`` — so scripts and test fixtures can start it on ``--port 0`` and read the URL.
Like every other process it logs JSON lines to stderr (``simulator.listening`` at start,
``simulator.stopped`` at the end), and on SIGTERM prints its stop report on stdout: the tasks,
requests and faults it served.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from geo_pipeline.cli.output import PORT
from geo_pipeline.domain.catalogue import RegistryError
from geo_pipeline.observability import logs

log = logging.getLogger("geo_pipeline.simulator")


def _parse_sets(values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``--set deepseek.transient_rate=0.1`` or ``--set transient_rate=0.1`` (every platform)."""
    out: dict[str, dict[str, Any]] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r}: expected [platform.]key=value", param_hint="--set")
        platform, _, key = name.rpartition(".")
        try:
            value = json.loads(raw)  # numbers, booleans, lists like [0.1,0.5]
        except ValueError:
            value = raw
        out.setdefault(platform or "*", {})[key] = value
    return out


@click.command("simulator")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=8765, show_default=True, type=PORT, help="Port; 0 picks a free port."
)
@click.option(
    "--profiles",
    "profiles_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML/JSON profile file: seed, defaults, platforms.<name>.<key>.",
)
@click.option("--seed", type=int, default=None, help="Seed of answers and faults (default 0).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="[PLATFORM.]KEY=VALUE",
    help="Override one profile key, e.g. --set deepseek.transient_rate=0.05 (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the ready line as JSON.")
def simulator(
    host: str,
    port: int,
    profiles_file: Path | None,
    seed: int | None,
    sets: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run the AI-platform simulator (task API, OpenAI-compatible endpoint, fee statements)."""
    from geo_pipeline.simulator.profiles import ProfileError, load_profiles
    from geo_pipeline.simulator.server import run

    logs.configure()
    try:
        config = load_profiles(profiles_file, seed=seed, overrides=_parse_sets(sets))
    except (ProfileError, RegistryError) as exc:
        raise click.ClickException(str(exc)) from exc

    started = time.monotonic()
    where: list[str] = []

    def ready(url: str) -> None:
        where.append(url)
        if as_json:
            click.echo(json.dumps({"url": url, "platforms": sorted(config.profiles)}))
        else:
            click.echo(
                f"simulator listening on {url} (platforms: {', '.join(sorted(config.profiles))})"
            )
        sys.stdout.flush()
        logs.event(
            log,
            "simulator.listening",
            url=url,
            platforms=sorted(config.profiles),
            seed=config.seed,
            pid=os.getpid(),
        )
        logs.flush()

    try:
        sim = run(config, host, port, ready)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    if sim is None:
        return
    served = sim.state.stats(include_keys=False)
    requests = served["requests"]
    report = {
        "simulator": where[0] if where else f"http://{host}:{port}",
        "seconds": round(time.monotonic() - started, 1),
        "tasks": served["tasks"],
        "requests": sum(requests.values()) if isinstance(requests, dict) else 0,
        "requests_by_kind": served["requests_by_kind"],
        "faults": served["faults"],
    }
    logs.event(log, "simulator.stopped", **report)
    logs.flush()
    click.echo(json.dumps(report))
    sys.stdout.flush()


def register(root: click.Group) -> None:
    """Add ``simulator`` to the root group."""
    root.add_command(simulator)

"""``geo-pipeline dev`` and the Dagster UI in a real browser: the asset graph shows every asset of
geo_pipeline.definitions, and after a run finishes its (run, channel) partitions show as
materialised — the sensor did it, nobody clicked. Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from geo_pipeline_tests.ops.conftest import ARTIFACTS
from geo_pipeline_tests.ops.dagster_ui import graphql, running_dev
from geo_pipeline_tests.processes import run_ok

# Starting Dagster, a run and the sensor's downstream runs takes 3-4 minutes on 2 loaded cores.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200)]

DOWNSTREAM = ("collection_results", "validated_evidence", "brand_analysis", "brand_visibility")
CONFIG = """\
tenant: acme
brand: {name: 瑞幸咖啡, aliases: [Luckin]}
competitors: [{name: 星巴克, aliases: [Starbucks]}]
questions: ["国内最好喝的咖啡品牌？", "Best coffee chain in China?"]
channels:  # the platforms `dev`'s worker serves (the example config's)
  - {platform: deepseek, device: web}
  - {platform: deepseek, device: app}
  - {platform: doubao, device: web}
  - {platform: kimi, device: web}
repeats: 1
"""


def _partition_stats(port: int) -> dict[str, int]:
    """numMaterialized per asset (numPartitions under "<asset> of"); empty while the webserver
    is too busy to answer."""
    try:
        return _partition_stats_now(port)
    except (OSError, KeyError, TypeError):
        return {}


def _partition_stats_now(port: int) -> dict[str, int]:
    data = graphql(
        port,
        "{ assetNodes { assetKey { path } partitionStats { numMaterialized numPartitions } } }",
    )
    stats: dict[str, int] = {}
    for n in data["assetNodes"]:
        name = "/".join(n["assetKey"]["path"])
        stats[name] = (n["partitionStats"] or {}).get("numMaterialized", 0)
        stats[f"{name} of"] = (n["partitionStats"] or {}).get("numPartitions", 0)
    return stats


def _dismiss_welcome(page: Any) -> None:
    """Dagster's first-visit "join the community" dialog covers the page; skip it if shown."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=5_000)
        skip.click()
    except Exception:
        pass  # not shown on this visit


def test_dev_dagster_ui_shows_every_asset_and_the_finished_partitions(
    db_url, redis_url, redis_ns, tmp_path, browser_page
):
    from geo_pipeline.definitions import defs

    assets = sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())
    with running_dev(db_url, redis_url, redis_ns, tmp_path) as ui:
        port, env = ui.port, ui.env
        page = browser_page
        page.goto(f"http://127.0.0.1:{port}/asset-groups", wait_until="networkidle")
        _dismiss_welcome(page)
        page.screenshot(path=str(ARTIFACTS / "dagster-asset-graph.png"), full_page=True)
        # With more than one asset group the global graph draws groups collapsed, so the names
        # are read from the catalogue, which lists every asset.
        page.goto(f"http://127.0.0.1:{port}/assets", wait_until="networkidle")
        _dismiss_welcome(page)
        for name in assets:
            page.get_by_text(name, exact=True).first.wait_for(timeout=180_000)
        page.screenshot(path=str(ARTIFACTS / "dagster-asset-catalogue.png"), full_page=True)

        # A run created the way a data engineer's launchpad job does: its partitions first
        # (one per channel of the run, then the run's own key).
        run_id = f"ui-{os.getpid()}"
        run_ok(
            [
                sys.executable,
                "-c",
                "import sys, dagster as dg; "
                "from geo_pipeline.defs.partitions import register_run_partitions; "
                "register_run_partitions(dg.DagsterInstance.get(), sys.argv[1], "
                "['deepseek__web', 'deepseek__app', 'doubao__web', 'kimi__web'])",
                run_id,
            ],
            env=env,
        )
        config = tmp_path / "config.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        cli = [sys.executable, "-m", "geo_pipeline.cli.main"]
        run_ok(
            [*cli, "billing", "deposit", "--tenant", "acme", "--amount", "100000"],
            env=env,
        )
        run_ok(
            [*cli, "runs", "create", str(config), "--run-id", run_id],
            env=env,
        )

        channels = 4
        stats = ui.wait_for(
            lambda: (
                (s := _partition_stats(port))
                and all(s.get(a, 0) >= channels for a in DOWNSTREAM)
                and s.get("billing_reconciliation", 0) >= 1
                and s
            ),
            420,
            "the sensor to materialise the finished partitions",
        )
        assert all(stats[a] == channels for a in DOWNSTREAM), stats
        # Only the run's own channels exist as partitions: 4 of 4 filled, none "missing".
        assert all(stats[f"{a} of"] == channels for a in DOWNSTREAM), stats

        page.goto(
            f"http://127.0.0.1:{port}/assets/brand_visibility?view=partitions",
            wait_until="networkidle",
        )
        _dismiss_welcome(page)
        page.get_by_text(f"Materialized ({channels})", exact=True).first.wait_for(timeout=180_000)
        page.get_by_text(run_id, exact=False).first.wait_for(timeout=180_000)
        page.screenshot(path=str(ARTIFACTS / "dagster-partitions.png"), full_page=True)
    assert Path(ARTIFACTS / "dagster-asset-graph.png").exists()

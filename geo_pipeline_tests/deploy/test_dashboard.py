"""The Grafana dashboard and its provisioning, validated offline: the JSON is a dashboard Grafana
loads, every query names a metric the processes really export, every panel reads the provisioned
data source, and the compose file mounts the files where Grafana and Prometheus look."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import geo_pipeline.observability.metrics  # noqa: F401  (registers every metric)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "geo_pipeline.json"


def _exported() -> set[str]:
    names = set()
    for collector in list(REGISTRY._collector_to_names):
        for metric in collector.collect():
            names.update(s.name for s in metric.samples)
            names.add(metric.name)
            # A labelled metric with no children yet has no samples: add its exposition names.
            if metric.type == "counter":
                names.add(f"{metric.name}_total")
            if metric.type == "histogram":
                names.update(f"{metric.name}{s}" for s in ("_bucket", "_sum", "_count"))
    return names


def test_dashboard_shows_what_the_issue_asks_for_from_real_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bgeo_[a-z_]+", e)}
    exported = _exported()
    missing = used - exported
    assert not missing, f"queries name metrics nobody exports: {sorted(missing)}"
    for needed in (
        "geo_queue_wait_seconds_bucket",
        "geo_upstream_accept_seconds_bucket",
        "geo_backlog_samples",
        "geo_uncertain_samples",
        "geo_evidence_missing_rate",
        "geo_reconciliation_difference_minor",
    ):
        assert needed in used, needed
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "geo-prometheus"
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
        assert all(t["refId"] and t["expr"] for t in p["targets"])


def test_compose_provisions_grafana_and_prometheus_scrapes_the_processes() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text(encoding="utf-8"))
    mounts = {
        v.split(":")[1]: DEPLOY / v.split(":")[0]
        for svc in ("grafana", "prometheus")
        for v in compose["services"][svc]["volumes"]
        if v.startswith("./")
    }
    assert mounts["/var/lib/grafana/dashboards"] == DASHBOARD.parent
    assert all(path.exists() for path in mounts.values()), mounts
    datasources = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text(encoding="utf-8")
    )
    assert datasources["datasources"][0]["uid"] == "geo-prometheus"
    providers = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/geo_pipeline.yaml").read_text(encoding="utf-8")
    )
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    prom = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text(encoding="utf-8"))
    targets = {
        t
        for job in prom["scrape_configs"]
        for sc in job.get("static_configs", [])
        for t in sc["targets"]
    }
    assert "sweeper:9400" in targets  # the backlog and business gauges come from the sweeper
    assert all(p.startswith("127.0.0.1:") for p in compose["services"]["grafana"]["ports"])

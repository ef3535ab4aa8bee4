"""`geo-pipeline deploy render` (issue 37): worker Deployments and KEDA ScaledObjects generated
from the connector registry, validated offline as the committed files are (test_deploy_schemas):
Kubernetes objects strictly against kubernetes-validate's schemas, KEDA objects against the KEDA
schema. The committed deploy/k8s files are the render of the simulator platforms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from geo_pipeline.cli.main import cli
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.ops.deploy_render import RenderOptions, render, select_platforms
from geo_pipeline_tests.deploy.test_deploy_schemas import DEPLOY, K8S_VERSION, _keda_schema


@pytest.fixture(autouse=True)
def no_engine_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which real engines are enabled depends on their key variables: none set here."""
    for entry in load_registry().every_entry().values():
        if entry.api_key_env:
            monkeypatch.delenv(entry.api_key_env, raising=False)


def docs(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def test_the_committed_files_are_the_render_of_the_enabled_platforms() -> None:
    files = render(select_platforms(load_registry()), RenderOptions())
    for name, text in files.items():
        committed = docs((DEPLOY / "k8s" / name).read_text(encoding="utf-8"))
        assert docs(text) == committed, name


def test_every_registered_platform_renders_valid_objects_with_its_key_from_the_secret() -> None:
    registry = load_registry()
    entries = select_platforms(registry, all_registered=True)
    assert {e.platform for e in entries} == set(registry.every_entry())
    assert any(e.requires_key for e in entries)  # real engines are in it
    out = {}
    for text in render(entries, RenderOptions(max_replicas=4)).values():
        out |= docs(text)
    keda = jsonschema.Draft202012Validator(_keda_schema())
    for doc in out.values():
        if doc["apiVersion"].startswith("keda.sh/"):
            keda.validate(doc)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    for e in entries:
        name = f"geo-worker-{e.platform.replace('_', '-')}"
        dep, so = out[("Deployment", name)], out[("ScaledObject", name)]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["args"][:3] == ["worker", "--platform", e.platform]
        env = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in container.get("env", [])}
        if e.requires_key:
            assert env == {e.api_key_env: {"name": "geo-pipeline-env", "key": e.api_key_env}}
        else:
            assert env == {}
        assert so["spec"]["scaleTargetRef"]["name"] == name and so["spec"]["maxReplicaCount"] == 4
        query = next(t for t in so["spec"]["triggers"] if t["type"] == "prometheus")["metadata"][
            "query"
        ]
        assert f'platform="{e.platform}"' in query
        assert ("uncertain" in query) == e.capabilities.recoverable
    # The args parse with the CLI the image runs.
    worker = cli.commands["worker"]
    for (kind, _), doc in out.items():
        if kind == "Deployment":
            worker.make_context(
                "worker", doc["spec"]["template"]["spec"]["containers"][0]["args"][1:]
            )


def test_cli_writes_the_files_and_refuses_an_unknown_platform(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        cli, ["deploy", "render", "--out", str(tmp_path), "--platform", "deepseek_api"]
    )
    assert res.exit_code == 0, res.output
    # the enabled platforms (the simulators: no engine key is set here) and the one named
    n = len(select_platforms(load_registry())) + 1
    assert f"{n} platform(s)" in res.output and "deepseek_api" in res.output
    written = docs((tmp_path / "worker.yaml").read_text(encoding="utf-8"))
    assert ("Deployment", "geo-worker-deepseek-api") in written
    bad = runner.invoke(cli, ["deploy", "render", "--platform", "nosuch"])
    assert bad.exit_code != 0 and "unknown platform 'nosuch'" in bad.output

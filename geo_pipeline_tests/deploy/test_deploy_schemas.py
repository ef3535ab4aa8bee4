"""Offline schema validation of everything under deploy/ (D1, D2, D7).

No cluster or container engine runs here, so each file is checked against the schema its real
consumer would apply: Kubernetes objects against the OpenAPI-derived schemas bundled with
``kubernetes-validate`` (strict: unknown fields fail), KEDA objects against a schema written from
the KEDA docs, the compose file against the Compose Specification schema. Helm values are
checked for the keys the chart needs from us. Each validator also gets a broken copy, so a
passing test means the schema really bites.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).with_name("schemas")
K8S_VERSION = "1.30"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for i, doc in enumerate(_docs(path)):
            out.append((f"{path.name}#{i}:{doc['kind']}", doc))
    return out


K8S_DOCS = _k8s_docs()
CORE = [(n, d) for n, d in K8S_DOCS if not d["apiVersion"].startswith("keda.sh/")]
KEDA = [(n, d) for n, d in K8S_DOCS if d["apiVersion"].startswith("keda.sh/")]


def test_every_manifest_kind_is_covered() -> None:
    kinds = {d["kind"] for _, d in K8S_DOCS}
    assert {"Deployment", "ScaledObject", "TriggerAuthentication", "Job", "Service"} <= kinds
    names = {d["metadata"]["name"] for _, d in K8S_DOCS if d["kind"] == "Deployment"}
    workers = {n for n in names if n.startswith("geo-worker-")}
    assert names - workers == {"geo-relay", "geo-sweeper", "geo-simulator"} and workers


@pytest.mark.parametrize(("name", "doc"), CORE, ids=[n for n, _ in CORE])
def test_kubernetes_manifest_is_valid(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubernetes_validation_rejects_an_unknown_field() -> None:
    doc = copy.deepcopy(next(d for n, d in CORE if n.startswith("worker.yaml")))
    doc["spec"]["template"]["spec"]["containers"][0]["envFromm"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _keda_schema() -> dict[str, Any]:
    return json.loads((SCHEMAS / "keda.schema.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "doc"), KEDA, ids=[n for n, _ in KEDA])
def test_keda_object_is_valid(name: str, doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(_keda_schema()).validate(doc)


def test_keda_scales_each_worker_deployment_on_its_backlog() -> None:
    deployments = {d["metadata"]["name"] for _, d in CORE if d["kind"] == "Deployment"}
    auth = {d["metadata"]["name"] for _, d in KEDA if d["kind"] == "TriggerAuthentication"}
    for so in (d for _, d in KEDA if d["kind"] == "ScaledObject"):
        assert so["spec"]["scaleTargetRef"]["name"] in deployments
        assert so["spec"]["minReplicaCount"] == 0  # idle platforms cost nothing
        backlog = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
        assert len(backlog) == 1 and "geo_backlog_samples" in backlog[0]["metadata"]["query"]
        assert backlog[0]["metricType"] == "AverageValue"
        streams = [t for t in so["spec"]["triggers"] if t["type"] == "redis-streams"]
        assert all("lagCount" in t["metadata"] and t["metadata"]["consumerGroup"] for t in streams)
        assert {t["authenticationRef"]["name"] for t in streams} <= auth


def test_keda_schema_rejects_a_prometheus_trigger_without_threshold() -> None:
    so = copy.deepcopy(next(d for _, d in KEDA if d["kind"] == "ScaledObject"))
    trigger = next(t for t in so["spec"]["triggers"] if t["type"] == "prometheus")
    del trigger["metadata"]["threshold"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_keda_schema()).validate(so)


def test_keda_schema_rejects_conflicting_scaling_modes() -> None:
    so = copy.deepcopy(next(d for _, d in KEDA if d["kind"] == "ScaledObject"))
    trigger = next(t for t in so["spec"]["triggers"] if t["type"] == "redis-streams")
    trigger["metadata"]["pendingEntriesCount"] = "10"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_keda_schema()).validate(so)


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text(encoding="utf-8"))


def _compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / "compose_spec.json").read_text(encoding="utf-8"))
    return jsonschema.Draft201909Validator(schema)


def test_compose_file_matches_the_compose_spec() -> None:
    errors = sorted(_compose_validator().iter_errors(_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_spec_rejects_a_broken_service() -> None:
    doc = _compose()
    doc["services"]["worker"]["depends_on"]["redis"]["condition"] = "when_it_feels_like_it"
    assert list(_compose_validator().iter_errors(doc))


def test_compose_runs_every_part_on_one_host() -> None:
    services = set(_compose()["services"])
    assert {
        "postgres",
        "redis",
        "s3",
        "dagster-webserver",
        "dagster-daemon",
        "worker",
        "relay",
        "sweeper",
        "simulator",
    } <= services


_INTERP = re.compile(r"^\$\{[A-Z0-9_]+(:\?[^}]*)?\}$")
_SECRET_KEYS = re.compile(r"(PASSWORD|SECRET|ACCESS_KEY|TOKEN|API_KEY)", re.IGNORECASE)


def _walk(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _walk(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [kv for i, v in enumerate(obj) for kv in _walk(v, f"{path}[{i}]")]
    return [(path, obj)]


def test_no_credential_is_written_into_any_deploy_file() -> None:
    """D2: credentials come from the environment or a Secret, never from a file in the repo."""
    found = []
    for path, value in _walk(_compose()):
        leaf = path.rsplit(".", 1)[-1]
        if _SECRET_KEYS.search(leaf) and not _INTERP.match(str(value)):
            found.append((path, value))
        if isinstance(value, str) and re.search(r"://[^/${}\s]+:[^@${}\s]+@", value):
            found.append((path, value))  # a literal user:password@ in a URL
    for name, doc in K8S_DOCS:
        assert doc["kind"] != "Secret", f"{name}: secrets are created out of band"
        for path, value in _walk(doc.get("data", {})):
            if _SECRET_KEYS.search(path):
                found.append((f"{name}{path}", value))
    helm = yaml.safe_load((DEPLOY / "helm" / "dagster-values.yaml").read_text(encoding="utf-8"))
    for path, value in _walk(helm):
        if re.search(r"password$", path, re.IGNORECASE) and value:
            found.append((path, value))
    assert not found


def test_dagster_helm_values_use_k8s_run_launcher_and_external_postgres() -> None:
    """The chart's values schema is not obtainable offline here; check the keys we rely on."""
    values = yaml.safe_load((DEPLOY / "helm" / "dagster-values.yaml").read_text(encoding="utf-8"))
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert {"name": "geo-pipeline-env"} in launcher["envSecrets"]
    pg = values["postgresql"]
    assert pg["enabled"] is False and pg["postgresqlHost"] and pg["postgresqlDatabase"]
    assert pg["postgresqlScheme"] == "postgresql+psycopg2"  # DESIGN 6: psycopg 3 breaks NOTIFY
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "geo_pipeline.definitions"]
    for key in ("repository", "tag", "pullPolicy"):
        assert deployment["image"][key]
    coord = values["dagsterDaemon"]["runCoordinator"]
    assert coord["type"] == "QueuedRunCoordinator"
    assert coord["config"]["queuedRunCoordinator"]["maxConcurrentRuns"] > 0


def test_dockerfile_is_slim_non_root_and_secret_free() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    instructions = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", " "))]
    assert instructions[0] == "FROM python:3.11-slim"
    users = [ln.split()[1] for ln in instructions if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    for ln in text.splitlines():
        if ln.lstrip().startswith(("ENV", "ARG")) or "=" in ln:
            assert not re.search(r"(PASSWORD|SECRET|_KEY|TOKEN)\s*=", ln), ln


def _geo_commands() -> list[list[str]]:
    """Every geo-pipeline argv the deploy files run (compose commands, k8s container args)."""
    argvs = []
    for name, svc in _compose()["services"].items():
        if "entrypoint" in svc or not str(svc.get("image", "")).startswith("${GEO_IMAGE"):
            continue
        argvs.append((f"compose:{name}", list(svc["command"])))
    for name, doc in K8S_DOCS:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            if str(c.get("image", "")).startswith("geo-pipeline"):
                argvs.append((f"{name}:{c['name']}", list(c["args"])))
    return argvs


@pytest.mark.parametrize(("where", "argv"), _geo_commands(), ids=[w for w, _ in _geo_commands()])
def test_deploy_files_run_commands_the_cli_has(where: str, argv: list[str]) -> None:
    """A renamed command or option fails here, not in a cluster at 3 a.m."""
    import click

    from geo_pipeline.cli.main import cli

    cmd: click.Command = cli
    rest = list(argv)
    name = "geo-pipeline"
    while isinstance(cmd, click.Group):
        assert rest and rest[0] in cmd.commands, f"{where}: no command {rest[:1]} in {name}"
        name = rest.pop(0)
        cmd = cmd.commands[name]
    cmd.make_context(name, rest)  # parses options; raises on an unknown one


def test_every_platform_has_a_worker_scaled_on_its_backlog_and_screenshot_stream() -> None:
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.streams import keys

    platforms = load_registry().capabilities()
    workers = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
        for _, d in CORE
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("geo-worker-")
    }
    scaled = {
        d["spec"]["scaleTargetRef"]["name"]: d["spec"]["triggers"]
        for _, d in KEDA
        if d["kind"] == "ScaledObject"
    }
    assert set(workers) == set(scaled) == {f"geo-worker-{p.replace('_', '-')}" for p in platforms}
    for platform, caps in platforms.items():
        name = f"geo-worker-{platform.replace('_', '-')}"
        args = workers[name]
        assert args[args.index("--platform") + 1] == platform
        by_type = {t["type"]: t["metadata"] for t in scaled[name]}
        query = by_type["prometheus"]["query"]
        assert f'platform="{platform}"' in query
        # Uncertain samples hold a replica only where a worker can resolve them (a lookup).
        assert ("uncertain" in query) == caps.recoverable
        assert by_type["redis-streams"]["stream"] == keys.stream_key(
            keys.DEFAULT_PREFIX, keys.screenshot_stream(platform)
        )
        assert by_type["redis-streams"]["consumerGroup"] == keys.GROUP

"""Kubernetes workers from the connector registry (issue 37): one Deployment and one KEDA
ScaledObject per platform, for every platform the registry enables, real engines included.

``deploy/k8s/worker.yaml`` and ``keda-scaledobject.yaml`` are this module's output for the
simulator platforms (a test renders them and compares), so the committed files and
``geo-pipeline deploy render`` cannot drift apart. The shape and why of each field are in the
comments at the top of those files: one Deployment per platform (R10), scaled on that platform's
backlog in PostgreSQL (geo_backlog_samples, D1) plus its screenshot stream's lag; uncertain
samples hold a replica only where a worker can resolve them (``Capabilities.recoverable``).

A real engine (``requires_key: true``) reads its key from the Secret geo-pipeline-env under the
variable the registry names (``api_key_env``, D2): the rendered container asks for that key
explicitly (not optional), so a Secret without it fails the pod at start, not the first request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from geo_pipeline.domain.catalogue import PlatformEntry, Registry
from geo_pipeline.domain.vocabulary import DEFAULT_IMAGE
from geo_pipeline.streams import keys

IMAGE = DEFAULT_IMAGE
SECRET = "geo-pipeline-env"
CONFIG_MAP = "geo-pipeline-config"
METRICS_PORT = 9400
PROMETHEUS = "http://prometheus-server.monitoring.svc:9090"
REDIS_AUTH = "geo-redis-auth"

WORKER_HEADER = """\
# One worker Deployment per platform (R10: a slow platform never takes another's workers), each
# scaled by its own ScaledObject on that platform's sample backlog in PostgreSQL
# (keda-scaledobject.yaml). SIGTERM hands back leases. Pods of every platform share the label
# app.kubernetes.io/name=geo-worker (network policy, dashboards); the instance label tells them
# apart. A test checks that every platform of the connector registry has one.
"""


@dataclass(frozen=True)
class RenderOptions:
    image: str = IMAGE
    max_replicas: int = 10
    backlog_per_replica: int = 500
    prometheus: str = PROMETHEUS
    prefix: str = keys.DEFAULT_PREFIX


def dns_name(platform: str) -> str:
    return f"geo-worker-{platform.replace('_', '-')}"


def worker_deployment(entry: PlatformEntry, opts: RenderOptions) -> dict[str, Any]:
    name = dns_name(entry.platform)
    labels = {
        "app.kubernetes.io/name": "geo-worker",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": "geo-pipeline",
        "geo-pipeline/platform": entry.platform.replace("_", "-"),
    }
    container: dict[str, Any] = {
        "name": "worker",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["worker", "--platform", entry.platform, "--metrics-port", str(METRICS_PORT)],
        "envFrom": [{"configMapRef": {"name": CONFIG_MAP}}, {"secretRef": {"name": SECRET}}],
    }
    if entry.requires_key and entry.api_key_env:
        # Not optional: a Secret without the key fails the pod at start (D2: only its name here).
        container["env"] = [
            {
                "name": entry.api_key_env,
                "valueFrom": {"secretKeyRef": {"name": SECRET, "key": entry.api_key_env}},
            }
        ]
    container |= {
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
        },
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": {
                    k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
                }
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "fsGroup": 10001,
                    },
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def scaled_object(entry: PlatformEntry, opts: RenderOptions) -> dict[str, Any]:
    name = dns_name(entry.platform)
    short = entry.platform.replace("_", "-")
    states = "queued|running|uncertain" if entry.capabilities.recoverable else "queued|running"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "geo-pipeline", "geo-pipeline/platform": short},
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "minReplicaCount": 0,
            "maxReplicaCount": opts.max_replicas,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {
                            "stabilizationWindowSeconds": 300,
                            "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}],
                        }
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "name": f"backlog-{short}",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": opts.prometheus,
                        "query": f'sum(geo_backlog_samples{{platform="{entry.platform}",'
                        f'state=~"{states}"}})',
                        "threshold": str(opts.backlog_per_replica),
                        "activationThreshold": "0",
                        "ignoreNullValues": "false",
                    },
                },
                {
                    "type": "redis-streams",
                    "name": f"screenshot-{short}",
                    "authenticationRef": {"name": REDIS_AUTH},
                    "metadata": {
                        "addressFromEnv": "REDIS_ADDRESS",
                        "stream": keys.stream_key(
                            opts.prefix, keys.screenshot_stream(entry.platform)
                        ),
                        "consumerGroup": keys.GROUP,
                        "lagCount": "100",
                    },
                },
            ],
        },
    }


def trigger_authentication() -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": REDIS_AUTH, "labels": {"app.kubernetes.io/part-of": "geo-pipeline"}},
        "spec": {
            "secretTargetRef": [{"parameter": "password", "name": SECRET, "key": "REDIS_PASSWORD"}]
        },
    }


class RenderError(ValueError):
    pass


def select_platforms(
    registry: Registry, wanted: Iterable[str] = (), all_registered: bool = False
) -> list[PlatformEntry]:
    """The enabled platforms (offered by this environment's registry: simulators, and real
    engines whose key variable is set), plus ``wanted`` ones named on purpose (a real engine
    whose key lives only in the cluster's Secret), or every registered one."""
    everything = registry.every_entry()
    chosen = {p: e for p, e in everything.items() if all_registered or p in registry.entries}
    for p in wanted:
        if p not in everything:
            raise RenderError(
                f"unknown platform {p!r}; registered: {', '.join(sorted(everything))}"
            )
        chosen[p] = everything[p]
    # Registry order (simulators first, as deploy/k8s has them), then the named ones.
    order = [*registry.entries, *registry.disabled]
    return [chosen[p] for p in order if p in chosen]


class _PlainDumper(yaml.SafeDumper):
    """Every value written out where it stands: a manifest a person reads and diffs has no YAML
    anchors (a shared labels mapping would otherwise be dumped as &id001 / *id001)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def render(entries: list[PlatformEntry], opts: RenderOptions) -> dict[str, str]:
    """{file name: YAML text} for deploy/k8s: the workers and their ScaledObjects."""
    dump = lambda docs: "---\n".join(  # noqa: E731
        yaml.dump(d, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True) for d in docs
    )
    return {
        "worker.yaml": WORKER_HEADER + dump([worker_deployment(e, opts) for e in entries]),
        "keda-scaledobject.yaml": dump(
            [trigger_authentication(), *(scaled_object(e, opts) for e in entries)]
        ),
    }

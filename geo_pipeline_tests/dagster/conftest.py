"""Fixtures for the Dagster layer: a Dagster instance of the test's own, resources pointing at the
test's real PostgreSQL database and Redis namespace, and helpers that create runs and drive their
samples through the allowed transitions (what the workers do, in SQL)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
import redis as redis_lib
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.defs.collection.jobs import plan_from_config
from geo_pipeline.defs.partitions import register_run_partitions
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.evidence import LocalArchive
from geo_pipeline.flows.create_run import create_run as flows_create_run

CHANNELS = ("deepseek__web", "qwen__app")


def collection_config(tenant: str = "acme", monitor: str | None = None) -> dict[str, Any]:
    """2 questions x 2 targets x 2 repeats = 8 samples, 4 per channel."""
    cfg: dict[str, Any] = {
        "tenant": tenant,
        "brand": {"name": "Acme", "aliases": ["阿克米"], "domains": ["acme.example"]},
        "competitors": [{"name": "Globex", "domains": ["globex.example"]}],
        "questions": ["best project tool for teams?", "which crm is cheapest?"],
        "channels": [
            {"platform": "deepseek", "device": "web", "regions": ["cn"], "modes": ["standard"]},
            {
                "platform": "qwen",
                "device": "app",
                "regions": ["cn"],
                "modes": ["standard"],
                "screenshot": "off",
            },
        ],
        "repeats": 2,
        "screenshot": "optional",
    }
    if monitor:
        cfg["monitor"] = monitor
    return cfg


@pytest.fixture
def dg_instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as instance:
        yield instance


# Where ``finish`` archives the objects it records; set per test by the autouse fixture below
# (tests run one at a time in a process, also under xdist).
_ARCHIVE: dict[str, LocalArchive] = {}


@pytest.fixture(autouse=True)
def evidence_dir(tmp_path: Path) -> Iterator[Path]:
    """The test's evidence archive (directory backend), shared by ``finish`` and ``resources``."""
    path = tmp_path / "evidence"
    _ARCHIVE["current"] = LocalArchive(path)
    yield path
    _ARCHIVE.clear()


@pytest.fixture
def resources(db_url: str, redis_url: str, redis_ns: str, evidence_dir: Path) -> dict[str, Any]:
    return {
        "db": PostgresResource(url=db_url),
        # The retention pass's own connection (an owner login in production); here the same.
        "retention_db": PostgresResource(url=db_url),
        "redis": RedisResource(url=redis_url, prefix=redis_ns),
        "evidence": EvidenceStorageResource(url=evidence_dir.as_uri()),
        "registry": ConnectorRegistryResource(),
        "settings": PipelineSettingsResource(),
    }


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as c:
        yield c


def fund(conn: psycopg.Connection[Any], tenant: str = "acme", amount: int = 10_000_000) -> None:
    ledger.deposit(conn, tenant, amount, "CNY", f"deposit:{tenant}:{uuid.uuid4().hex}")


def create_run(
    conn: psycopg.Connection[Any],
    instance: dg.DagsterInstance | None = None,
    config: dict[str, Any] | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> str:
    """A funded, confirmed, not yet dispatched run (what the launchpad job creates)."""
    cfg = config or collection_config()
    fund(conn, cfg["tenant"])
    plan = plan_from_config(cfg, ConnectorRegistryResource(), run_id, conn)
    rid, _ = flows_create_run(conn, plan, dispatch=False, **kwargs)
    if instance is not None:
        register_run_partitions(instance, rid, plan.config.channels)
    return rid


def sample_ids(conn: psycopg.Connection[Any], run_id: str, channel: str) -> list[str]:
    rows = conn.execute(
        "SELECT sample_id FROM geo.samples WHERE run_id = %s AND channel = %s ORDER BY sample_id",
        (run_id, channel),
    ).fetchall()
    return [r["sample_id"] for r in rows]


@dataclass
class Completed:
    completed: list[str]
    failed: list[str]


def finish(
    conn: psycopg.Connection[Any],
    run_id: str,
    channel: str,
    *,
    client: redis_lib.Redis | None = None,
    stream: str | None = None,
    fail: int = 0,
    invalid: int = 0,
    only: int | None = None,
) -> Completed:
    """Drive samples of a partition through the allowed transitions as a worker would:
    claim -> acceptance record -> accepted -> completed with an archived answer, a citation and
    (policy permitting) a screenshot, plus its charge; the first ``fail`` samples fail instead.
    Each terminal sample gets a completion stream entry when ``client`` is given."""
    ids = sample_ids(conn, run_id, channel)
    ids = [
        s
        for s in ids
        if conn.execute(
            "SELECT collection_state FROM geo.samples WHERE sample_id = %s", (s,)
        ).fetchone()["collection_state"]
        == "queued"  # type: ignore[index]
    ]
    if only is not None:
        ids = ids[:only]
    failed, completed = ids[:fail], ids[fail:]
    with conn.transaction():
        conn.execute(
            """UPDATE geo.samples SET submission_state = 'submitting', collection_state = 'running',
                 attempt_no = attempt_no + 1, fencing_token = fencing_token + 1,
                 lease_owner = 'test', lease_until = now() + interval '5 minutes'
               WHERE sample_id = ANY(%s)""",
            (ids,),
        )
        conn.execute(
            """UPDATE geo.samples SET submission_state = 'planned', collection_state = 'failed',
                 collection_reason = 'INVALID_PARAMS', lease_owner = NULL, lease_until = NULL
               WHERE sample_id = ANY(%s)""",
            (failed,),
        )
        conn.execute(
            """INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,
                 state, upstream_id, accepted_at, resolved_by)
               SELECT sample_id || ':' || attempt_no, sample_id, attempt_no, platform, 'accepted',
                      'up-' || sample_id, now(), 'response'
               FROM geo.samples WHERE sample_id = ANY(%s)""",
            (completed,),
        )
        conn.execute(
            """UPDATE geo.samples SET submission_state = 'accepted', upstream_id = 'up-' || sample_id,
                 accepted_at = now() WHERE sample_id = ANY(%s)""",
            (completed,),
        )
        for i, sid in enumerate(completed):
            row = conn.execute(
                "SELECT tenant_id, platform, mode, attempt_no, screenshot_policy "
                "FROM geo.samples WHERE sample_id = %s",
                (sid,),
            ).fetchone()
            assert row is not None
            text = f"Acme is a good choice ({sid})"
            digest = hashlib.sha256(text.encode()).hexdigest()
            is_valid = i >= invalid
            conn.execute(
                """INSERT INTO geo.answers (sample_id, revision, attempt_no, upstream_id, raw_text,
                     sanitized_html, raw_sha256, captured_at, validity, validity_reason,
                     validity_rule_version)
                   VALUES (%s, 1, %s, %s, %s, %s, %s, now(), %s, %s, 'v1')""",
                (
                    sid,
                    row["attempt_no"],
                    f"up-{sid}",
                    text,
                    f"<p>{text}</p>",
                    digest,
                    "valid" if is_valid else "invalid",
                    None if is_valid else "EMPTY",
                ),
            )
            archive = _ARCHIVE["current"]
            answer_key = f"{row['tenant_id']}/{run_id}/{sid}/1/answer.md"
            archive.put(answer_key, text.encode(), mime_type="text/markdown")
            conn.execute(
                """INSERT INTO geo.evidence_objects (sample_id, tenant_id, run_id, revision, kind,
                     storage_key, sha256, size_bytes, mime_type, attempt_no, captured_at)
                   VALUES (%s, %s, %s, 1, 'answer_raw', %s, %s, %s, 'text/markdown', %s, now())""",
                (
                    sid,
                    row["tenant_id"],
                    run_id,
                    answer_key,
                    digest,
                    len(text),
                    row["attempt_no"],
                ),
            )
            if row["screenshot_policy"] != "off":
                png = b"\x89PNG fake " + sid.encode()
                shot_key = f"{row['tenant_id']}/{run_id}/{sid}/1/s.png"
                archive.put(shot_key, png, mime_type="image/png")
                conn.execute(
                    """INSERT INTO geo.evidence_objects (sample_id, tenant_id, run_id, revision,
                         kind, storage_key, sha256, size_bytes, mime_type, attempt_no, captured_at)
                       VALUES (%s, %s, %s, 1, 'screenshot', %s, %s, 10, 'image/png', %s, now())""",
                    (
                        sid,
                        row["tenant_id"],
                        run_id,
                        shot_key,
                        hashlib.sha256(png).hexdigest(),
                        row["attempt_no"],
                    ),
                )
            conn.execute(
                """INSERT INTO geo.citations (sample_id, revision, ordinal, relation, raw_url,
                     normalized_url, registrable_domain)
                   VALUES (%s, 1, 0, 'cited', 'https://acme.example/a?utm_source=x',
                           'https://acme.example/a', 'acme.example')""",
                (sid,),
            )
            ledger.post_charge(
                conn,
                ledger.ChargeRequest(
                    tenant_id=row["tenant_id"],
                    run_id=run_id,
                    sample_id=sid,
                    attempt_no=row["attempt_no"],
                    upstream_id=f"up-{sid}",
                    platform=row["platform"],
                    mode=row["mode"],
                    upstream_outcome="completed",
                    screenshot_used=row["screenshot_policy"] != "off",
                ),
            )
        conn.execute(
            """UPDATE geo.samples SET collection_state = 'completed', evidence_state = 'stored',
                 completed_at = now(), lease_owner = NULL, lease_until = NULL
               WHERE sample_id = ANY(%s)""",
            (completed,),
        )
    if client is not None and stream is not None:
        pipe = client.pipeline()
        for sid in ids:
            pipe.xadd(
                stream,
                {
                    "event_id": uuid.uuid4().hex,
                    "sample_id": sid,
                    "run_id": run_id,
                    "channel": channel,
                    "collection_state": "failed" if sid in failed else "completed",
                },
            )
        pipe.execute()
    return Completed(completed, failed)


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    """{check name: passed} of every check evaluated in the run."""
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def check_severity(result: dg.ExecuteInProcessResult, name: str) -> dg.AssetCheckSeverity:
    for e in result.get_asset_check_evaluations():
        if e.check_name == name:
            return e.severity
    raise KeyError(name)


def op_metadata(result: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    """The output metadata of an op (the ops output Nothing: their results are metadata)."""
    [event] = [e for e in result.all_events if e.is_successful_output and e.node_name == node]
    assert event.step_output_data is not None
    return {k: v.value for k, v in event.step_output_data.metadata.items()}

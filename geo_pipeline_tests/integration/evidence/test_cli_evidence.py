"""`geo-pipeline evidence get/list` as a user runs it: a subprocess against the real database and
both archive backends; tenant-checked, digest-verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from geo_pipeline.evidence import LocalArchive, archive_evidence, record_evidence
from geo_pipeline.evidence.s3_async import ObjectStoreArchive
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline_tests.fixtures.s3 import overwrite_behind_our_back
from geo_pipeline_tests.integration.evidence.helpers import (
    ANSWER,
    good_screenshot,
    make_evidence,
    seed_sample,
)
from geo_pipeline_tests.processes import outcome


@pytest.fixture
def cli(db_url, archive, request):
    env = {**os.environ, "GEO_DATABASE_URL": db_url}
    if isinstance(archive, LocalArchive):
        env["GEO_EVIDENCE_URL"] = archive.root.as_uri()
    else:
        assert isinstance(archive, ObjectStoreArchive)
        env.update(request.getfixturevalue("s3_server").env())
        env["GEO_EVIDENCE_URL"] = f"s3://{archive.bucket}/{archive.prefix}"

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "geo_pipeline.cli.main", "evidence", *args],
            capture_output=True,
            env=env,
            timeout=120,
        )

    return run


def test_cli_get_list_presign_and_refusals(db, archive, cli, tmp_path):
    ref = seed_sample(db, tenant_id="tenant-a", policy="required")
    seed_sample(db, tenant_id="tenant-b")
    with db.transaction():
        record_evidence(
            db,
            archive_evidence(
                archive, ref, 1, make_evidence(ref, screenshot=good_screenshot()), "required"
            ),
        )

    got = cli("get", ref.sample_id, "--tenant", "tenant-a")
    assert got.returncode == 0, outcome(got)
    assert got.stdout.decode() == ANSWER

    out = tmp_path / "shot.png"
    got = cli(
        "get",
        ref.sample_id,
        "--tenant",
        "tenant-a",
        "--kind",
        "screenshot",
        "--out",
        str(out),
        "--json",
    )
    meta = json.loads(got.stdout)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and meta["revision"] == 1
    assert meta["mime_type"] == "image/png" and len(meta["sha256"]) == 64

    listing = json.loads(cli("list", ref.sample_id, "--tenant", "tenant-a", "--json").stdout)
    # The display is derived from answer_raw, not stored (evidence.display).
    assert {r["kind"] for r in listing} == {
        "answer_raw", "citations", "response_raw", "screenshot", "thumbnail",
    }  # fmt: skip
    html = cli("get", ref.sample_id, "--tenant", "tenant-a", "--kind", "answer_html", "--json")
    assert html.returncode == 0, outcome(html)
    meta = json.loads(html.stdout)
    assert meta["content"] == render_answer(ANSWER) and "<table>" in meta["content"]
    assert meta["derived_from"] == "answer_raw" and meta["mime_type"].startswith("text/html")

    denied = cli("get", ref.sample_id, "--tenant", "tenant-b")
    assert denied.returncode != 0 and denied.stdout == b""
    assert b"not visible" in denied.stderr or b"is visible" in denied.stderr
    assert b"Traceback" not in denied.stderr
    assert cli("list", ref.sample_id, "--tenant", "tenant-b").returncode != 0

    presigned = cli("get", ref.sample_id, "--tenant", "tenant-a", "--presign", "--expires", "60")
    assert presigned.returncode != 0 and b"--out" in presigned.stderr  # a bundle part: no URL
    presigned = cli(
        "get", ref.sample_id, "--tenant", "tenant-a", "--kind", "screenshot", "--presign",
        "--expires", "60",
    )  # fmt: skip
    if isinstance(archive, LocalArchive):
        assert presigned.returncode != 0 and b"--out" in presigned.stderr
    else:
        assert presigned.returncode == 0, outcome(presigned)
        assert httpx.get(presigned.stdout.decode().strip()).content == out.read_bytes()

    key = db.execute(
        "SELECT storage_key FROM geo.evidence_objects WHERE sample_id = %s AND kind = 'answer_raw'",
        (ref.sample_id,),
    ).fetchone()["storage_key"]
    overwrite_behind_our_back(archive, key, b"tampered")
    tampered = cli("get", ref.sample_id, "--tenant", "tenant-a")
    assert tampered.returncode != 0 and b"does not match" in tampered.stderr
    assert tampered.stdout == b""

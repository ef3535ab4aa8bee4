"""The evidence bucket's policies under deploy/s3 (R20): valid IAM policy documents, and the
bounds that keep tenants apart -- a tenant reader gets its own prefix only and never writes, the
bucket refuses presigned reads older than the application's one-hour maximum."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from geo_pipeline.evidence.access import PRESIGN_MAX_S

ROOT = Path(__file__).resolve().parents[2]
S3 = ROOT / "deploy" / "s3"
SCHEMA = json.loads((Path(__file__).with_name("schemas") / "iam-policy.schema.json").read_text())
TENANT = "${aws:PrincipalTag/geo_tenant}"


def _load(name: str) -> dict[str, Any]:
    return json.loads((S3 / name).read_text(encoding="utf-8"))


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


@pytest.mark.parametrize("name", sorted(p.name for p in S3.glob("*.json")))
def test_policy_documents_are_valid(name):
    doc = _load(name)
    jsonschema.validate(doc, SCHEMA)
    broken = copy.deepcopy(doc)
    broken["Statement"][0]["Effect"] = "Permit"  # the schema bites
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_tenant_reader_is_confined_to_its_prefix_and_never_writes():
    doc = _load("tenant-reader-policy.json")
    allows = [s for s in doc["Statement"] if s["Effect"] == "Allow"]
    assert allows
    for s in allows:
        actions = set(_list(s["Action"]))
        assert actions <= {"s3:GetObject", "s3:ListBucket"}, actions
        if "s3:GetObject" in actions:
            assert all(
                r.startswith(f"arn:aws:s3:::geo-evidence/{TENANT}/") for r in _list(s["Resource"])
            )
        if "s3:ListBucket" in actions:
            prefixes = _list(s["Condition"]["StringLike"]["s3:prefix"])
            assert all(p.startswith(f"{TENANT}/") for p in prefixes)
    denied = {a for s in doc["Statement"] if s["Effect"] == "Deny" for a in _list(s["Action"])}
    assert {"s3:PutObject", "s3:DeleteObject"} <= denied


def test_bucket_caps_presigned_urls_at_the_applications_maximum():
    doc = _load("evidence-bucket-policy.json")
    ages = [
        int(s["Condition"]["NumericGreaterThan"]["s3:signatureAge"])
        for s in doc["Statement"]
        if s["Effect"] == "Deny" and "s3:signatureAge" in json.dumps(s.get("Condition", {}))
    ]
    assert ages == [PRESIGN_MAX_S * 1000]
    tls = [s for s in doc["Statement"] if "aws:SecureTransport" in json.dumps(s)]
    assert tls and tls[0]["Effect"] == "Deny"

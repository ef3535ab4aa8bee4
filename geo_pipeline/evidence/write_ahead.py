"""Write-ahead copies of paid responses (docs/design.md section 8).

A synchronous engine (OpenAI-compatible, Responses, Perplexity, Gemini, Anthropic) returns the
answer with the request, and bills it then. Until the fenced completion commits, that answer would
live only in one worker's memory; a crash or a hand-back would make the next worker fail the
sample (or ask, and pay, again). So the raw response is archived the moment it arrives, under a
key of its own per sample and attempt, before any database write can fail; recovery reads it
back instead of asking the engine again.

The object is content-addressed by its key: a second put of the same attempt's response is the
idempotent re-write of the same bytes (the archive refuses different bytes under one key).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from geo_pipeline.evidence.archive import Archive, ObjectMissing, object_key
from geo_pipeline.evidence.recording import SampleRef


@dataclass(frozen=True)
class HeldResponse:
    upstream_id: str
    raw: bytes
    mime_type: str


def response_key(ref: SampleRef, attempt_no: int) -> str:
    return object_key(ref.tenant_id, ref.run_id, ref.sample_id, f"wal-a{attempt_no}", "response")


def put_response(archive: Archive, ref: SampleRef, attempt_no: int, held: HeldResponse) -> str:
    """Archive the response of one attempt; returns its key."""
    envelope = {
        "upstream_id": held.upstream_id,
        "mime_type": held.mime_type,
        "raw_b64": base64.b64encode(held.raw).decode("ascii"),
    }
    key = response_key(ref, attempt_no)
    archive.put(key, json.dumps(envelope, sort_keys=True).encode(), mime_type="application/json")
    return key


def get_response(archive: Archive, ref: SampleRef, attempt_no: int) -> HeldResponse | None:
    """The archived response of one attempt, or None when none was archived."""
    try:
        data = archive.get(response_key(ref, attempt_no))
    except ObjectMissing:
        return None
    envelope = json.loads(data)
    return HeldResponse(
        upstream_id=str(envelope["upstream_id"]),
        raw=base64.b64decode(envelope["raw_b64"]),
        mime_type=str(envelope.get("mime_type") or "application/json"),
    )

"""A run's evidence as a WACZ (Web Archive Collection Zipped, 1.1.1), and the check that finds
torn objects (issue 33, docs/design.md section 10).

``export_wacz`` writes one zip that ReplayWeb.page, pywb and warcio open:

* ``archive/data.warc.gz`` -- every evidence record of the run, gzip per record: WARC-stored
  records copied byte for byte once verified against the database, and evidence stored before
  WARC (bundles, whole objects) written as ``resource``/``metadata`` records of the verified
  bytes (evidence.warc), so an auditor gets one format whatever the run's age;
* ``indexes/index.cdxj`` -- one line per record (SURT-style key, timestamp, JSON with url, mime,
  status, sha256 payload digest, offset, length, filename), sorted;
* ``pages/pages.jsonl`` -- the pages a player lists, for each answer: the upstream exchange (or
  the raw body), the answer text (and its rendered HTML where kept), the captured page of a
  browser capture and the screenshot, each titled with its sample and what it is, so an auditor
  finds them in ReplayWeb.page's pages view (records under ``urn:geo:`` URIs replay there too);
* ``datapackage.json`` -- every file above with its sha256 and size.

Nothing unverified is exported: a record whose digest does not match is an error, as on every
read (R20). The caller has authorised the tenant (R20): ``export_wacz`` checks the run is the
tenant's before it reads a byte.

``verify_run`` reads every object the run's evidence names, whole, and reports each torn one:
missing, not the bytes its content-addressed key names, or holding a record whose block or
payload digest does not match the index.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from geo_pipeline.evidence.access import EvidenceAccessDenied, read_object
from geo_pipeline.evidence.archive import (
    Archive,
    ArchiveError,
    DigestMismatch,
    read_range,
    sha256_hex,
)
from geo_pipeline.evidence.bundle import digest_in_key, is_bundle_key
from geo_pipeline.evidence.warc import (
    Part,
    parse_record,
    part_records,
    split_record_key,
    warc_digest,
)
from geo_pipeline.evidence.warc_store import digest_of_object_key, verify_record
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

WACZ_VERSION = "1.1.1"
WARC_NAME = "data.warc.gz"
_METADATA_KINDS = ("citations",)
# The records an auditor opens as pages, and what each is called in the pages list.
PAGE_KINDS = {
    "response_raw": "upstream exchange",
    "answer_raw": "answer text",
    "answer_html": "answer as rendered",
    "page_html": "captured page",
    "screenshot": "screenshot",
}


@dataclass
class WaczSummary:
    run_id: str
    records: int = 0
    pages: int = 0
    warc_bytes: int = 0
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256


def _run_tenant_check(conn: Conn, tenant_id: str, run_id: str) -> None:
    row = conn.execute(Q("evidence.run_tenant"), {"run_id": run_id}).fetchone()
    if row is None or row["tenant_id"] != tenant_id:
        raise EvidenceAccessDenied(f"no run {run_id} is visible to tenant {tenant_id}")


def surt_key(url: str) -> str:
    """The CDXJ sort key as pywb's indexer writes it (cdxj-indexer, the ``surt`` package):
    ``com,example:8443)/path?a=1&b=2`` for http(s) -- lower case, ``www.`` dropped, a port
    kept unless the scheme's default, one trailing slash dropped, query arguments sorted, no
    fragment; the URI itself in lower case otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return url.lower()
    host = re.sub(r"^www\d*\.", "", parts.hostname.lower())
    key = ",".join(reversed(host.split(".")))
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port != {"http": 80, "https": 443}[parts.scheme]:
        key += f":{port}"
    path = parts.path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    key += ")" + path.lower()
    if parts.query:
        key += "?" + "&".join(sorted(parts.query.lower().split("&")))
    return key


def _warc_member(archive: Archive, row: dict[str, Any]) -> bytes:
    """One indexed WARC record, as stored, once verified against the index."""
    key, offset, length = row["object_key"], int(row["record_offset"]), int(row["record_length"])
    member = read_range(archive, key, offset, length)
    where = f"{key}#{offset}-{length}"
    if len(member) != length:
        raise DigestMismatch(where, row["payload_sha256"], f"torn: {len(member)} of {length}")
    verify_record(where, member, row["payload_sha256"], row["block_sha256"])
    return member


def _converted_member(archive: Archive, row: dict[str, Any]) -> bytes:
    """Evidence stored before WARC (a bundle part, a whole object): a record of its verified
    bytes."""
    data = read_object(archive, str(row["storage_key"]), row["kind"], row["sha256"])
    rtype = "metadata" if row["kind"] in _METADATA_KINDS else "resource"
    (record,) = part_records(
        sample_id=row["sample_id"], attempt_no=int(row["attempt_no"] or 0),
        captured_at=row["captured_at"],
        parts=[Part(row["kind"], rtype, row["mime_type"], data)],
    )  # fmt: skip
    return record.data


def _members(conn: Conn, archive: Archive, run_id: str) -> list[tuple[dict[str, Any], bytes]]:
    """Every record of the run, verified: the indexed WARC records (the request included),
    then the evidence stored before WARC, converted."""
    out = []
    for r in conn.execute(Q("evidence.run_warc_records"), {"run_id": run_id}).fetchall():
        row = dict(r)
        out.append(({**row, "sha256": row["payload_sha256"]}, _warc_member(archive, row)))
    for r in conn.execute(Q("evidence.run_objects_for_export"), {"run_id": run_id}).fetchall():
        row = dict(r)
        if split_record_key(str(row["storage_key"])) is None:
            out.append((row, _converted_member(archive, row)))
    return out


def export_wacz(
    conn: Conn, archive: Archive, tenant_id: str, run_id: str, out: BinaryIO
) -> WaczSummary:
    """Write the run's evidence as a WACZ to ``out`` (module docstring)."""
    _run_tenant_check(conn, tenant_id, run_id)
    members = _members(conn, archive, run_id)
    summary = WaczSummary(run_id)
    warc = io.BytesIO()
    cdxj: list[str] = []
    pages: list[dict[str, Any]] = []
    for row, member in members:
        record = parse_record(member, f"run {run_id} record of {row['sample_id']}")
        offset = warc.tell()
        warc.write(member)
        url = record.target_uri
        date = record.headers.get("WARC-Date", "")
        ts = "".join(ch for ch in date if ch.isdigit())[:14]
        entry: dict[str, Any] = {
            "url": url,
            "mime": row["mime_type"],
            "digest": warc_digest(row["sha256"]),
            "length": str(len(member)),
            "offset": str(offset),
            "filename": WARC_NAME,
            "recordType": record.record_type,
            "sample": row["sample_id"],
            "kind": row["kind"],
        }
        if record.record_type == "response":
            status_line = record.block.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(status_line) >= 2:
                entry["status"] = status_line[1]
        cdxj.append(f"{surt_key(url)} {ts} {json.dumps(entry, sort_keys=True)}")
        if row["kind"] in PAGE_KINDS:
            what = PAGE_KINDS[row["kind"]]
            if row["kind"] == "response_raw" and record.record_type != "response":
                what = "upstream answer body"  # kept without its exchange
            pages.append({"id": record.record_id.strip("<>"), "url": url, "ts": date,
                          "title": f"sample {row['sample_id']}: {what}"})  # fmt: skip
        summary.records += 1
    warc_bytes = warc.getvalue()
    files = {
        f"archive/{WARC_NAME}": warc_bytes,
        "indexes/index.cdxj": ("\n".join(sorted(cdxj)) + "\n" if cdxj else "").encode(),
        "pages/pages.jsonl": "\n".join(
            json.dumps(p, sort_keys=True)
            for p in [{"format": "json-pages-1.0", "id": "pages", "title": "Answers"}, *pages]
        ).encode() + b"\n",
    }  # fmt: skip
    package = {
        "profile": "data-package",
        "wacz_version": WACZ_VERSION,
        "title": f"geo_pipeline evidence of run {run_id}",
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "software": "geo_pipeline",
        "mainPageURL": next((p["url"] for p in pages if p["title"].endswith(": upstream exchange")),
                            pages[0]["url"] if pages else None),
        "resources": [
            {"name": path.rsplit("/", 1)[-1], "path": path,
             "hash": f"sha256:{sha256_hex(data)}", "bytes": len(data)}
            for path, data in files.items()
        ],
    }  # fmt: skip
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            # The WARC is gzip per record already; a stored entry keeps its offsets seekable.
            kind = zipfile.ZIP_STORED if path.endswith(".gz") else zipfile.ZIP_DEFLATED
            zf.writestr(path, data, compress_type=kind)
        zf.writestr("datapackage.json", json.dumps(package, indent=2), zipfile.ZIP_DEFLATED)
    summary.pages = len(pages)
    summary.warc_bytes = len(warc_bytes)
    summary.files = {p: sha256_hex(d) for p, d in files.items()}
    return summary


# --------------------------------------------------------------------------- verify
@dataclass(frozen=True)
class TornObject:
    key: str
    problem: str


def _whole_object_problem(archive: Archive, key: str) -> tuple[bytes | None, str | None]:
    try:
        data = archive.get(key)
    except ArchiveError as exc:
        return None, f"unreadable: {exc}"
    named = digest_of_object_key(key) if not is_bundle_key(key) else digest_in_key(key)
    if named is not None and sha256_hex(data) != named:
        return data, f"sha256 {sha256_hex(data)} is not the {named} its key names"
    return data, None


def verify_run(conn: Conn, archive: Archive, run_id: str) -> tuple[int, list[TornObject]]:
    """(objects checked, the torn ones) for every object the run's evidence names."""
    rows = [dict(r) for r in conn.execute(
        Q("evidence.run_objects_for_export"), {"run_id": run_id}).fetchall()]  # fmt: skip
    records = [dict(r) for r in conn.execute(
        Q("evidence.run_warc_records"), {"run_id": run_id}).fetchall()]  # fmt: skip
    by_object: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_object.setdefault(r["object_key"], []).append(r)
    plain = {str(r["storage_key"]): r for r in rows if split_record_key(str(r["storage_key"]))
             is None}  # fmt: skip
    torn: list[TornObject] = []
    for key in sorted(by_object):
        data, problem = _whole_object_problem(archive, key)
        if problem is None and data is not None:
            problem = _first_bad_record(key, data, by_object[key])
        if problem is not None:
            torn.append(TornObject(key, problem))
    for key, row in sorted(plain.items()):
        data, problem = _whole_object_problem(archive, key)
        if problem is None and data is not None and not is_bundle_key(key):
            if sha256_hex(data) != row["sha256"]:
                problem = f"sha256 {sha256_hex(data)} is not the recorded {row['sha256']}"
        if problem is not None:
            torn.append(TornObject(key, problem))
    return len(by_object) + len(plain), torn


def _first_bad_record(key: str, data: bytes, records: Iterable[dict[str, Any]]) -> str | None:
    for r in records:
        off, length = int(r["record_offset"]), int(r["record_length"])
        member = data[off : off + length]
        where = f"{key}#{off}-{length}"
        if len(member) != length:
            return f"record at {off}: cut off ({len(member)} of {length} bytes)"
        try:
            verify_record(where, member, r["payload_sha256"], r["block_sha256"])
        except ArchiveError as exc:
            return f"record at {off}: {exc}"
    return None

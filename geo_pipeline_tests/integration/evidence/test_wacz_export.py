"""`geo-pipeline evidence export RUN --format wacz` and `evidence verify RUN` as a user runs
them (issue 33): a subprocess against the real database and both archive backends.

The WACZ is opened with warcio's reader and every record's digest is checked against the
database; evidence stored before WARC (a bundle) comes out as records too; a torn object is
listed by verify (exit 1) and makes the export fail rather than ship it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zipfile
from dataclasses import replace
from typing import Any

from psycopg.rows import dict_row
from warcio.archiveiterator import ArchiveIterator

from geo_pipeline.connectors.base import HttpExchange
from geo_pipeline.evidence import archive_evidence, record_evidence
from geo_pipeline.evidence.recording import prepare_warc_evidence, record_evidence_batch
from geo_pipeline.evidence.wacz import PAGE_KINDS
from geo_pipeline.evidence.warc import digest_hex, split_record_key
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline_tests.fixtures.s3 import overwrite_behind_our_back
from geo_pipeline_tests.integration.evidence.helpers import (
    good_screenshot,
    make_evidence,
    seed_sample,
)
from geo_pipeline_tests.integration.evidence.test_cli_evidence import cli  # noqa: F401

EXCHANGE = HttpExchange(
    method="GET",
    url="http://sim.test/tasks/t-1/result",
    request_headers=(("Authorization", "Bearer sk-LIVE-SECRET"),),
    request_body=b"",
    status=200,
    reason="OK",
    response_headers=(("Content-Type", "application/json"),),
)


def _rows(db: Any, run_id: str) -> list[dict[str, Any]]:
    """Every record the database says the run has: the WARC index (the request included) and
    the evidence stored before WARC (bundle parts)."""
    with db.cursor(row_factory=dict_row) as cur:
        return [dict(r) for r in cur.execute(
            "SELECT kind, payload_sha256 AS sha256, object_key || '#' || record_offset || '-'"
            " || record_length AS storage_key FROM geo.warc_records WHERE run_id = %s"
            " UNION ALL SELECT kind, sha256, storage_key FROM geo.evidence_objects"
            " WHERE run_id = %s AND storage_key NOT LIKE '%%#%%'",
            (run_id, run_id)).fetchall()]  # fmt: skip


def _seed(db: Any, archive: Any) -> Any:
    ref = seed_sample(db, tenant_id="tenant-a", policy="required")
    seed_sample(db, tenant_id="tenant-b")
    # Revision 1 as WARC (with the exchange, a screenshot and a browser's page at an address a
    # SURT key must spell as pywb's indexer does), revision 2 as a bundle (the format before):
    # one run, both formats.
    ev = replace(
        make_evidence(ref, screenshot=good_screenshot()),
        exchange=EXCHANGE,
        page_html=b"<html><body><a href='../41/'>older</a>Acme</body></html>",
        capture={"page_url": "https://www.Chat.Example.test:8443/A/s/42/?t=1&Lang=zh"},
    )
    stored = store_batch(archive, [prepare_warc_evidence(ref, 1, ev, "required")])
    with db.transaction():
        record_evidence_batch(db, stored)
        record_evidence(db, archive_evidence(archive, ref, 2, make_evidence(ref, text="v2"),
                                             "optional"))  # fmt: skip
    return ref


def test_export_wacz_every_record_matches_the_database(db, archive, cli, tmp_path) -> None:  # noqa: F811
    ref = _seed(db, archive)
    out = tmp_path / "run.wacz"
    got = cli("export", ref.run_id, "--tenant", "tenant-a", "--format", "wacz", "--out", str(out),
              "--json")  # fmt: skip
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    rows = _rows(db, ref.run_id)
    assert summary["records"] == len(rows)
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        assert names == {"archive/data.warc.gz", "indexes/index.cdxj", "pages/pages.jsonl",
                         "datapackage.json"}  # fmt: skip
        package = json.loads(zf.read("datapackage.json"))
        for res in package["resources"]:
            data = zf.read(res["path"])
            assert res["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
            assert res["bytes"] == len(data)
        warc_bytes = zf.read("archive/data.warc.gz")
        cdxj = zf.read("indexes/index.cdxj").decode().splitlines()
        pages = [json.loads(line) for line in zf.read("pages/pages.jsonl").decode().splitlines()]
    expected = sorted((r["kind"], r["sha256"]) for r in rows)
    seen = []
    for record in ArchiveIterator(io.BytesIO(warc_bytes)):
        kind_hint = record.rec_headers.get_header("WARC-Target-URI")
        payload = record.content_stream().read()
        digest = hashlib.sha256(payload).hexdigest()
        declared = digest_hex(record.rec_headers.get_header("WARC-Payload-Digest"))
        assert digest == declared, kind_hint
        seen.append(digest)
    assert sorted(seen) == sorted(d for _, d in expected)  # every record, each as recorded
    assert {k for k, _ in expected} >= {"response_raw", "request", "answer_raw", "citations",
                                        "screenshot", "thumbnail"}  # fmt: skip
    assert b"sk-LIVE-SECRET" not in gzip.decompress(warc_bytes)
    assert len(cdxj) == len(rows)
    first = json.loads(cdxj[0].split(" ", 2)[2])
    assert first["filename"] == "data.warc.gz" and int(first["length"]) > 0
    # Every CDXJ line points at a record that reads back alone from its offset.
    for line in cdxj:
        entry = json.loads(line.split(" ", 2)[2])
        off, length = int(entry["offset"]), int(entry["length"])
        one = next(iter(ArchiveIterator(io.BytesIO(warc_bytes[off : off + length]))))
        assert one.rec_headers.get_header("WARC-Target-URI") == entry["url"]
    assert pages[0]["format"] == "json-pages-1.0"
    # A page for each record an auditor opens (PAGE_KINDS), in both revisions, titled with its
    # sample and what it is; the exchange, the answer text and the screenshot among them.
    kinds = [json.loads(line.split(" ", 2)[2])["kind"] for line in cdxj]
    assert len(pages) == 1 + sum(k in PAGE_KINDS for k in kinds)
    titles = [p["title"] for p in pages[1:]]
    assert titles.count(f"sample {ref.sample_id}: upstream exchange") == 1  # revision 1 (WARC)
    assert titles.count(f"sample {ref.sample_id}: upstream answer body") == 1  # revision 2
    assert titles.count(f"sample {ref.sample_id}: answer text") == 2
    assert f"sample {ref.sample_id}: screenshot" in titles

    # Another tenant is refused before a byte is read.
    refused = cli("export", ref.run_id, "--tenant", "tenant-b", "--out", str(tmp_path / "b.wacz"))
    assert refused.returncode != 0 and b"is visible to tenant tenant-b" in refused.stderr
    assert not (tmp_path / "b.wacz").exists()


def test_verify_lists_a_torn_object_and_export_refuses_it(db, archive, cli, tmp_path) -> None:  # noqa: F811
    ref = _seed(db, archive)
    ok = cli("verify", ref.run_id, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["torn"] == []
    warc_key = next(split_record_key(r["storage_key"])[0]  # type: ignore[index]
                    for r in _rows(db, ref.run_id) if "#" in r["storage_key"])  # fmt: skip
    data = archive.get(warc_key)
    overwrite_behind_our_back(archive, warc_key, data[: len(data) // 2])  # a torn write
    bad = cli("verify", ref.run_id, "--json")
    assert bad.returncode == 1, bad.stderr
    torn = json.loads(bad.stdout)["torn"]
    assert [t["key"] for t in torn] == [warc_key]
    out = tmp_path / "torn.wacz"
    refused = cli("export", ref.run_id, "--tenant", "tenant-a", "--out", str(out))
    assert refused.returncode != 0 and not out.exists()

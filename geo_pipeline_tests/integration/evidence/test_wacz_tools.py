"""An exported WACZ as the web-archiving tools read it (issue 33): Webrecorder's own validator
(`wacz validate`, py-wacz) accepts it, and Webrecorder's indexer (`cdxj-indexer`, the one pywb and
py-wacz index with) finds in its WARC exactly the records our CDXJ names, at the same offsets,
lengths and digests. pywb itself cannot be installed beside this project (it pins redis 2.10.6),
so replay is checked through the index pywb would build and the records it would serve."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from geo_pipeline_tests.integration.evidence.test_cli_evidence import cli  # noqa: F401
from geo_pipeline_tests.integration.evidence.test_wacz_export import _rows, _seed
from geo_pipeline_tests.processes import outcome


def _export(db: Any, archive: Any, cli: Any, tmp_path: Path) -> tuple[Any, Path]:  # noqa: F811
    ref = _seed(db, archive)
    out = tmp_path / "run.wacz"
    got = cli("export", ref.run_id, "--tenant", "tenant-a", "--format", "wacz", "--out", str(out))
    assert got.returncode == 0, outcome(got)
    return ref, out


def test_wacz_validate_accepts_the_export(db, archive, cli, tmp_path) -> None:  # noqa: F811
    _, out = _export(db, archive, cli, tmp_path)
    got = subprocess.run(
        [sys.executable, "-m", "wacz", "validate", "-f", str(out)],
        capture_output=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 0, outcome(got)
    assert b"Validation succeeded, the passed WACZ is valid" in got.stdout, outcome(got)


def test_cdxj_indexer_finds_every_record_our_index_names(db, archive, cli, tmp_path) -> None:  # noqa: F811
    ref, out = _export(db, archive, cli, tmp_path)
    with zipfile.ZipFile(out) as zf:
        warc = zf.read("archive/data.warc.gz")
        ours = [line for line in zf.read("indexes/index.cdxj").decode().splitlines() if line]
        pages = [json.loads(p) for p in zf.read("pages/pages.jsonl").decode().splitlines()]
    path = tmp_path / "data.warc.gz"
    path.write_bytes(warc)
    # In a process of its own: surt (its dependency) has regexes Python 3.12 warns about, and
    # the tests run with warnings as errors.
    got = subprocess.run(
        [sys.executable, "-c", "from cdxj_indexer.main import main; main()", "--records", "all",
         "--sort", str(path)],
        capture_output=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 0, outcome(got)
    theirs = [line for line in got.stdout.decode().splitlines() if line]

    def entries(lines: list[str]) -> set[tuple[str, str, str, str, str]]:
        out_ = set()
        for line in lines:
            key, ts, body = line.split(" ", 2)
            e = json.loads(body)
            out_.add((key, ts, e["offset"], e["length"], e.get("digest", "")))
        return out_

    # Same records, same SURT keys, timestamps, offsets, lengths and payload digests.
    assert len(theirs) == len(ours) == len(_rows(db, ref.run_id))
    assert entries(theirs) == entries(ours)
    # The HTTP response record replays as pywb would serve it: status and body from the index.
    by_offset = {json.loads(line.split(" ", 2)[2])["offset"]: line for line in theirs}
    responses = [json.loads(line.split(" ", 2)[2]) for line in theirs if '"status"' in line]
    assert responses and all(r["status"] == "200" for r in responses)
    for page in pages[1:]:
        hits = [line for line in by_offset.values() if f'"url": "{page["url"]}"' in line]
        assert hits, f"page {page['url']} is in no index line"
    one = responses[0]
    off, length = int(one["offset"]), int(one["length"])
    record = next(iter(ArchiveIterator(io.BytesIO(warc[off : off + length]))))
    assert record.rec_type == "response" and record.http_headers.get_statuscode() == "200"
    assert record.content_stream().read()  # the answer's body, as received

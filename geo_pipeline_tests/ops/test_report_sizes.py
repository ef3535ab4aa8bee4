"""A screenshot's ``size_bytes`` (the image) beside its WARC record's length in the storage key
(the record, gzip-compressed with its WARC headers) read as two sizes of one thing (issue #34, a
fourth newcomer's read): each report labels both."""

from __future__ import annotations

from geo_pipeline.ops import report


def test_a_warc_stored_screenshot_says_what_each_size_is() -> None:
    media = {"storage_key": "t/runs/r/batch-1.warc.gz#1200-3638", "size_bytes": 3786}
    report.label_sizes(media)
    assert media["size_note"] == (
        "image 3,786 bytes; stored as WARC record 3,638 bytes (gzip-compressed, with its WARC "
        "headers) at offset 1,200 of t/runs/r/batch-1.warc.gz"
    ), media
    assert media["warc_record"] == {
        "object_key": "t/runs/r/batch-1.warc.gz", "offset": 1200, "length_bytes": 3638,
    }  # fmt: skip
    whole = {"storage_key": "t/runs/r/s.png", "size_bytes": 3786}
    report.label_sizes(whole)
    assert whole["size_note"] == "image 3,786 bytes" and whole["warc_record"] is None


def test_a_thumbnail_larger_than_its_screenshot_says_why() -> None:
    """The demo showed a thumbnail of 7,434 bytes beside its screenshot of 3,876 (issue #34, a
    fifth read): the simulator's screenshots are already thumbnail-sized PNGs, re-encoded as
    JPEG. The note says so where it happens, and only there."""
    from geo_pipeline.evidence.thumbnails import make_thumbnail
    from geo_pipeline.simulator.screenshots import render_png

    png = render_png("t-1", "kimi", "哪个咖啡品牌最好？")
    thumb_bytes = make_thumbnail(png)
    assert len(thumb_bytes) > len(png)  # the cause, measured on the simulator's own image
    shot = {"storage_key": "k#0-10", "size_bytes": len(png), "mime_type": "image/png"}
    thumb = {"storage_key": "k#10-20", "size_bytes": len(thumb_bytes), "mime_type": "image/jpeg"}
    for m in (shot, thumb):
        report.label_sizes(m)
    report.explain_thumbnail_size(thumb, shot)
    assert f"larger than its screenshot ({len(png):,} bytes)" in thumb["size_note"], thumb
    assert "the same pixels as a JPEG" in thumb["size_note"] and "image/png" in thumb["size_note"]
    small = {"storage_key": "k#20-5", "size_bytes": 5}
    report.label_sizes(small)
    before = small["size_note"]
    report.explain_thumbnail_size(small, shot)
    assert small["size_note"] == before, small


def test_counts_of_a_total_are_right_aligned_like_every_number() -> None:
    """The "cited with a competitor" and "target brand mentioned when searched" cells ("3/4 (75 %)")
    sat left-aligned beside right-aligned numbers (issue #34, a fifth read)."""
    from geo_pipeline.analysis.ui_api import rate_of
    from geo_pipeline.ops.export import numeric_cell

    cells = [rate_of(3, 4), "12/20 (60 %)", "80 % (58–92 %, n = 20)", "0.02 CNY", "−0.20 CNY"]
    assert [c for c in cells if not numeric_cell(c)] == []
    assert not any(numeric_cell(c) for c in ("kimi__web", "n/a (n = 0)", "Q1", "2026-12-06"))

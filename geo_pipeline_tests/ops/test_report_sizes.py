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

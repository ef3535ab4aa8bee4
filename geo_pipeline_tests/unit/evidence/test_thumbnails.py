"""Thumbnails are derived separately; the original keeps its resolution (R21)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from geo_pipeline.evidence.thumbnails import (
    THUMBNAIL_MAX,
    ImageUnreadable,
    inspect_image,
    make_thumbnail,
)


def _png(size, mode="RGB"):
    out = io.BytesIO()
    Image.new(mode, size, (10, 20, 30, 128) if mode == "RGBA" else (10, 20, 30)).save(out, "PNG")
    return out.getvalue()


def test_thumbnail_is_small_keeps_aspect_and_is_deterministic():
    original = _png((1280, 2560))
    thumb = make_thumbnail(original)
    with Image.open(io.BytesIO(thumb)) as img:
        assert img.format == "JPEG"
        assert img.height == THUMBNAIL_MAX[1] and img.width == THUMBNAIL_MAX[1] // 2
    assert make_thumbnail(original) == thumb
    assert inspect_image(original).width == 1280  # the original itself is untouched


def test_transparent_screenshots_get_a_white_background():
    thumb = make_thumbnail(_png((400, 400), "RGBA"))
    with Image.open(io.BytesIO(thumb)) as img:
        assert img.mode == "RGB"


@pytest.mark.parametrize("data", [b"", b"<html>login</html>", b"\x89PNG\r\n\x1a\nbroken"])
def test_unreadable_images_raise_a_clear_error(data):
    with pytest.raises(ImageUnreadable, match="cannot decode"):
        make_thumbnail(data)

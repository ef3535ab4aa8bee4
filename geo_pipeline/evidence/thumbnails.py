"""Screenshot thumbnails (R21): the original is archived at its own resolution, byte for byte;
the thumbnail is a separate, derived object for lists and reports."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

THUMBNAIL_MAX = (320, 320)
THUMBNAIL_MIME = "image/jpeg"
_MIME_BY_FORMAT = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "WEBP": "image/webp",
    "GIF": "image/gif",
}


class ImageUnreadable(ValueError):
    """The bytes are not an image Pillow can decode (or one too large to decode safely)."""


@dataclass(frozen=True)
class ImageInfo:
    mime_type: str
    width: int
    height: int


def _open(data: bytes) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # A decompression-bomb warning is an unreadable image here, not a log line.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()
            return image
    except (UnidentifiedImageError, Image.DecompressionBombError, Image.DecompressionBombWarning,
            OSError, SyntaxError, ValueError) as exc:  # fmt: skip
        raise ImageUnreadable(f"cannot decode screenshot image: {exc}") from exc


def _info(image: Image.Image) -> ImageInfo:
    fmt = image.format or "octet-stream"
    return ImageInfo(_MIME_BY_FORMAT.get(fmt, f"image/{fmt.lower()}"), image.width, image.height)


def _thumbnail_of(image: Image.Image, max_size: tuple[int, int]) -> bytes:
    if image.mode not in ("RGB", "L"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        rgba = image.convert("RGBA")
        background.paste(rgba, mask=rgba.getchannel("A"))
        image = background
    else:
        image = image.copy()  # thumbnail() works in place; the decoded original stays intact
    image.thumbnail(max_size)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=80, optimize=True)
    return out.getvalue()


def inspect_image(data: bytes) -> ImageInfo:
    """Format and size of an image; raises ImageUnreadable."""
    return _info(_open(data))


def make_thumbnail(data: bytes, max_size: tuple[int, int] = THUMBNAIL_MAX) -> bytes:
    """A JPEG no larger than ``max_size`` keeping the aspect ratio. Deterministic for the same
    input, so re-archiving the same screenshot re-creates the same thumbnail object."""
    return _thumbnail_of(_open(data), max_size)


def screenshot_derivatives(
    data: bytes, max_size: tuple[int, int] = THUMBNAIL_MAX
) -> tuple[ImageInfo, bytes]:
    """Format/size and thumbnail from one decode (decoding a full-page PNG is the costly part)."""
    image = _open(data)
    return _info(image), _thumbnail_of(image, max_size)

"""Deterministic screenshot PNGs of simulated answers, drawn with Pillow.

Small (320×240) so the simulator stays fast, but a real PNG that thumbnailing and digests can be
tested on (R20, R21). The same task always yields the same bytes.
"""

from __future__ import annotations

import hashlib
import io

from PIL import Image, ImageDraw

WIDTH, HEIGHT = 320, 240


def render_png(task_id: str, platform: str, question: str) -> bytes:
    digest = hashlib.blake2b(f"{task_id}|{question}".encode(), digest_size=6).digest()
    accent = (digest[0], digest[1], digest[2])
    img = Image.new("RGB", (WIDTH, HEIGHT), (250, 250, 250))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, WIDTH, 28), fill=accent)
    draw.text((8, 8), f"{platform} | {task_id}"[:48], fill=(255, 255, 255))
    # Pillow's default bitmap font has no CJK glyphs: draw the question's bytes as bars instead,
    # which keeps the picture tied to the question without shipping a font.
    for i, byte in enumerate(hashlib.sha256(question.encode()).digest()[:16]):
        y = 40 + i * 12
        draw.rectangle((8, y, 8 + byte, y + 8), fill=(accent[2], accent[0], accent[1]))
    draw.text((8, HEIGHT - 20), "geo_pipeline simulator", fill=(90, 90, 90))
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=False)
    return out.getvalue()

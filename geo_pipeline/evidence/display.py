"""An answer's display, derived off the collection hot path (R19, issue #14).

What a person sees of an answer is ``render_answer(text)`` (evidence.sanitise: Markdown parser,
then the allow-list sanitiser), a pure function of the answer text. Rendering costs about 1 ms of
CPU per answer -- half of what archiving an answer cost the worker -- so the worker no longer
renders: it records the answer with ``geo.answers.sanitized_html = ''`` (``DERIVED``) and the
bundle holds the raw response, the text and the citations, no ``answer_html`` part. The display
is then:

* derived at read time from the recorded text, with the same renderer and sanitiser
  (``answer_display``; ``evidence get --kind answer_html`` renders the archived, digest-verified
  ``answer_raw`` part, evidence.access);
* materialised into ``geo.answers.sanitized_html`` before the text may go
  (``materialise_displays``: retention calls it for a run before it clears the raw text, so the
  display outlives the text as before).

A stored non-empty ``sanitized_html`` (every answer recorded before this change, and every
materialised one) is served as it is. ``render_answer`` is deterministic, so the derived display
of an answer equals what the worker used to store for it. An answer whose display renders to
nothing (empty text, or only markup the sanitiser removes) keeps ``''``, which derives to the
same ``''``.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from geo_pipeline.evidence.sanitise import render_answer
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

DERIVED = ""  # geo.answers.sanitized_html of an answer whose display is made from its text
MATERIALISE_BATCH = 500


def answer_display(sanitized_html: str | None, raw_text: str | None) -> str | None:
    """The safe HTML to show for an answer row: the stored display when there is one, else
    rendered from the answer's text (the same renderer and sanitiser the worker used). None when
    there is neither (no answer)."""
    if sanitized_html:
        return sanitized_html
    if raw_text is None:
        return sanitized_html
    return render_answer(raw_text)


def materialise_displays(conn: Conn, run_id: str, *, batch: int = MATERIALISE_BATCH) -> int:
    """Render and store the display of every answer of ``run_id`` that still has ``DERIVED``
    and its text; returns how many rows got a display. Run it before the raw text is cleared
    (retention), inside the caller's transaction (never commits). Needs UPDATE on geo.answers
    (the owner's role, as retention's text clearing does). Idempotent: an answer with a display
    is never touched again, and re-rendering gives the same bytes."""
    done = 0
    after: dict[str, Any] = {"after_sample": "", "after_revision": 0}
    while True:
        rows = conn.execute(
            Q("evidence.displays_to_materialise"), {"run_id": run_id, "limit": batch, **after}
        ).fetchall()
        if not rows:
            return done
        rendered = [
            {"sample_id": r["sample_id"], "revision": r["revision"], "html": html}
            for r in rows
            if (html := render_answer(r["raw_text"]))
        ]
        if rendered:
            done += conn.execute(
                Q("evidence.materialise_displays"), {"rows": Jsonb(rendered)}
            ).rowcount
        last = rows[-1]
        after = {"after_sample": last["sample_id"], "after_revision": last["revision"]}


def fill_displays(rows: list[dict[str, Any]], source_key: str = "display_source") -> None:
    """For readers of answer rows (the HTML report): replace each row's ``sanitized_html`` with
    ``answer_display(sanitized_html, row[source_key])`` and drop ``source_key``, the answer text
    the query selects only where the display is derived (``CASE WHEN sanitized_html = '' THEN
    raw_text END``), so no raw text reaches a template (R19)."""
    for row in rows:
        source = row.pop(source_key, None)
        if "sanitized_html" in row:
            row["sanitized_html"] = answer_display(row["sanitized_html"], source)

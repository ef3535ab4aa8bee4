"""Writing a completion batch's evidence rows (issue 33): what recording decides from, read
under the batch's lock, and the rows written with one COPY per table.

COPY costs the server about half the CPU a row of ``INSERT ... SELECT FROM jsonb_to_recordset``
(bench/evidence_rows_cost.py); the statement-level guards with transition tables
(guard_citation_insert, guard_evidence_object_insert) and the per-row tenant trigger run for
COPY as for INSERT. What the INSERTs decided in SQL is decided here from the rows read under
the batch's advisory lock (every writer of these rows takes it, evidence.lock_sample(s)):

* an evidence object row is one per (sample, kind, sha256); a new digest takes its kind's next
  revision (``evidence.insert_object``'s max(revision) + 1 and ON CONFLICT DO NOTHING);
* a WARC record is its (object, offset) and the object's key is its bytes' digest, so the same
  placement can be recorded twice (a re-parse of the same answer, a re-claimed screenshot): the
  rows of an object that has index rows already keep INSERT ... ON CONFLICT DO NOTHING.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import DataError
from psycopg._copy_base import format_row_text
from psycopg.abc import Transformer
from psycopg.adapt import Transformer as AdaptTransformer
from psycopg.types.json import Jsonb

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

# The COPY statements' columns (sql/queries/evidence.sql copy_*). Recording builds each row as
# a tuple in its table's order (evidence.recording _decide, _object_rows, _warc_rows): no dict
# per row to pick the values from again. An object row has no revision yet (_new_objects).
ANSWER_COLUMNS = (
    "sample_id", "tenant_id", "revision", "attempt_no", "upstream_id", "raw_text",
    "sanitized_html", "raw_sha256", "content_sha256", "captured_at", "provider_truncated",
    "validity", "validity_reason", "validity_rule_version", "warnings", "search_queries",
    "web_search_used",
)  # fmt: skip
CITATION_COLUMNS = (
    "sample_id", "tenant_id", "revision", "ordinal", "citation_key", "relation", "raw_url",
    "normalized_url", "registrable_domain", "title", "span_start", "span_end", "cited_text",
)  # fmt: skip
WARC_COLUMNS = (
    "object_key", "record_offset", "record_length", "tenant_id", "run_id", "sample_id",
    "record_type", "record_id", "target_uri", "kind", "mime_type", "block_sha256",
    "payload_sha256", "payload_size", "attempt_no", "captured_at",
)  # fmt: skip
OBJECT_COLUMNS = (
    "sample_id", "tenant_id", "run_id", "kind", "storage_key", "sha256", "size_bytes",
    "mime_type", "attempt_no", "captured_at",
)  # fmt: skip
_WARNINGS = ANSWER_COLUMNS.index("warnings")

# Each COPY's column types for psycopg's dumpers (``Copy.set_types``): one dumper a column, not
# one looked up for each value's type, ~half the C row formatter's time a row (issue 33: the
# worker's database thread). The bytes are those of the per-value dumpers for the values
# recording makes: a str as its text (char(64) digests, the capture time as its isoformat, the
# answers' text[] values as ``text_array``'s literal), an int as its digits, a bool as t/f.
# A value of another type -- a text dumper refuses it -- sends the table's rows with the
# per-value dumpers, as before; so does a bool where an integer goes, or anything but a bool
# where a boolean goes (_ODD_TYPED: the typed dumper would write 1, or the value's truth).
_T, _I, _B = "text", "int8", "bool"
COPY_TYPES = {
    "evidence.copy_answers": (_T, _T, _I, _I, _T, _T, _T, _T, _T, _T, _B, _T, _T, _T, _T, _T, _B),
    "evidence.copy_citations": (_T, _T, _I, _I, _T, _T, _T, _T, _T, _T, _I, _I, _T),
    "evidence.copy_warc_records": (_T, _I, _I, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, _I, _I, _T),
    "evidence.copy_objects": (_T, _T, _T, _I, _T, _T, _T, _I, _T, _I, _T),
}  # fmt: skip


def samples_for_record(conn: Conn, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Lock a round's samples' evidence (one order for every batch) and read what recording
    decides from, by sample id: ``evidence.samples_for_record``'s row, with ``has_screenshot``
    and the sample's object rows as ``objects`` {kind: (latest revision, {sha256, ...})}."""
    conn.execute(Q("evidence.lock_samples"), {"sample_ids": text_array(ids)})
    return read_for_record(conn, ids)


def read_for_record(conn: Conn, ids: list[str]) -> dict[str, dict[str, Any]]:
    """``samples_for_record`` without taking the lock (the caller holds it)."""
    rows = {}
    # The ids as their text[] literal (text_array): psycopg's list dumper took ~2 us an id
    # (issue 33), the statement casts the text as it did the list.
    literal = text_array(ids)
    for r in conn.execute(Q("evidence.samples_for_record"), {"sample_ids": literal}).fetchall():
        kinds: dict[str, tuple[int, set[str]]] = {}
        for o in r["objects"]:
            kind, revision, sha256 = o.split(" ", 2)
            latest, digests = kinds.get(kind, (0, set()))
            digests.add(sha256.rstrip())  # character(64): equal up to trailing blanks
            kinds[kind] = (max(latest, int(revision)), digests)
        r["objects"] = kinds
        r["has_screenshot"] = "screenshot" in kinds
        rows[r["sample_id"]] = r
    return rows


def write_rows(
    conn: Conn,
    samples: dict[str, dict[str, Any]],
    answers: list[tuple[Any, ...]],
    citations: list[tuple[Any, ...]],
    warc_rows: list[tuple[Any, ...]],
    objects: list[tuple[Any, ...]],
) -> dict[str, list[str]]:
    """Write a round's evidence rows (tuples in ``*_COLUMNS`` order), one statement per table,
    and return the kinds that got a new object row by sample id. ``samples``:
    ``samples_for_record`` of the round (read under its lock), from which the object rows are
    numbered and deduplicated."""
    if answers:
        _copy(conn, "evidence.copy_answers", map(answer_copy_row, answers))
    if citations:
        _copy(conn, "evidence.copy_citations", citations)
    if warc_rows:
        _write_warc_rows(conn, warc_rows)
    created: dict[str, list[str]] = {}
    new = _new_objects(samples, objects, created)
    if new:
        _copy(conn, "evidence.copy_objects", new)
    return created


def _copy(conn: Conn, name: str, rows: Iterable[Sequence[Any]]) -> None:
    rows = rows if isinstance(rows, list) else list(rows)
    with conn.cursor() as cur, cur.copy(Q(name)) as copy:  # type: ignore[arg-type]
        # Formatted inside the COPY as ``copy.write_row`` would (a value psycopg refuses aborts
        # the statement as it did), sent with one write: with one dumper a column when every
        # value is of the column's type (COPY_TYPES), else with psycopg's dumper of each value.
        data = None
        if not _odd_typed(name, rows):
            copy.set_types(COPY_TYPES[name])  # type: ignore[arg-type]
            try:
                data = copy_data(copy.formatter.transformer, rows)
            except (TypeError, DataError):  # a value of another type: as before
                data = None
        if data is None:
            data = copy_data(AdaptTransformer.from_context(conn), rows)
        copy.write(data)


def _odd_typed(name: str, rows: list[Sequence[Any]]) -> bool:
    """Whether a row has a bool in an integer column or a non-bool in a boolean one, among the
    columns whose values come from a connector (_CHECKED): a typed dumper accepts these and
    writes other bytes than the per-value dumpers (1 for True; a value's truth). A typed text
    or integer dumper refuses a value of any other type (then ``_copy`` formats as before)."""
    for i, kind in _CHECKED.get(name, ()):
        if kind == _B:
            if any(type(r[i]) is not bool and r[i] is not None for r in rows):
                return True
        elif any(type(r[i]) is bool for r in rows):
            return True
    return False


# The columns of a connector's values that a typed dumper would take in another type: the
# answers' flags (provider_truncated, web_search_used), a citation's span. The other integers
# are recording's own (revisions, ordinals, offsets, sizes, attempt numbers).
_CHECKED = {
    "evidence.copy_answers": ((10, _B), (16, _B)),
    "evidence.copy_citations": ((10, _I), (11, _I)),
}


def copy_data(tx: Transformer, rows: Iterable[Sequence[Any]]) -> bytearray:
    """The COPY text data of ``rows``: what ``Copy.write_row`` sends for each, the same bytes
    (psycopg's own C row formatter with the copy's transformer: every value's dumper, the
    escapes, None as \\N) without ``write_row``'s two Python calls a row and their buffering
    (issue 33: ~13 rows a sample, ~4 us a sample of the worker's database thread)."""
    data = bytearray()
    for row in rows:
        format_row_text(row, tx, data)
    return data


def answer_copy_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """An answer row with its two text[] values (warnings, search_queries) as the array literal
    psycopg's list dumper would make of them (``text_array``)."""
    i = _WARNINGS
    return (*row[:i], text_array(row[i]), text_array(row[i + 1]), *row[i + 2 :])


# When psycopg's text list dumper (psycopg.types.array ListDumper) quotes an element: the empty
# string, a double quote, a brace, the delimiter, a backslash, ASCII white space, the word NULL
# in any case, the Unicode spaces CockroachDB strips (U+1680, U+2000-U+200A, U+2028, U+2029,
# U+202F, U+205F, U+3000). Its pattern on the element's UTF-8, here on the str.
_NEEDS_QUOTES = re.compile(
    r'^$|["{},\\\s]|^null$|[\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]',
    re.ASCII | re.IGNORECASE,
)


def text_array(items: Sequence[Any]) -> str | list[Any]:
    """A list of strings as the text of the ``text[]`` value psycopg's list dumper sends for it
    (``{a,"b c"}``; the COPY row formatter then escapes it as any text), ~8x cheaper than the
    dumper (issue 33). Any other element: the list, for psycopg to dump."""
    if not items:
        return "{}"
    parts = []
    for item in items:
        if type(item) is not str:
            return list(items)
        if _NEEDS_QUOTES.search(item):
            item = '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(item)
    return "{" + ",".join(parts) + "}"


def _write_warc_rows(conn: Conn, rows: list[tuple[Any, ...]]) -> None:
    """The WARC index rows: COPY, unless their object has rows already -- then a record may be
    recorded again (``evidence.warc_objects_recorded``) and INSERT ... ON CONFLICT (object_key,
    record_offset) DO NOTHING adds only what is missing, as it always did."""
    keys = list(dict.fromkeys(r[0] for r in rows))  # object_key
    found = conn.execute(Q("evidence.warc_objects_recorded"), {"object_keys": text_array(keys)})
    indexed = {r["object_key"] for r in found}
    if indexed:
        again = [dict(zip(WARC_COLUMNS, r, strict=True)) for r in rows if r[0] in indexed]
        conn.execute(Q("evidence.insert_warc_records"), {"rows": Jsonb(again)})
        rows = [r for r in rows if r[0] not in indexed]
    if rows:
        _copy(conn, "evidence.copy_warc_records", rows)


def _new_objects(
    samples: dict[str, dict[str, Any]],
    objects: list[tuple[Any, ...]],
    created: dict[str, list[str]],
) -> list[tuple[Any, ...]]:
    """``evidence.insert_object``'s rules for a round's object rows, decided from the rows read
    under the round's lock: a (sample, kind, sha256) recorded already, or earlier in the round,
    adds nothing; a new one takes its kind's latest revision before the round + 1 (a sample
    is in a round once). The COPY rows, and the created kinds added to ``created``."""
    out = []
    seen: set[tuple[str, str, str]] = set()
    for row in objects:
        sid, kind, sha = row[0], row[3], row[5].rstrip()
        latest, digests = samples[sid]["objects"].get(kind, (0, ()))
        if sha in digests or (sid, kind, sha) in seen:
            continue
        seen.add((sid, kind, sha))
        out.append((*row[:3], latest + 1, *row[3:]))
        created.setdefault(sid, []).append(kind)
    return out

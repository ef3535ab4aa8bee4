"""The evidence rows' COPY data made without ``Copy.write_row`` (evidence.rows ``copy_data``,
``text_array``; issue 33: the worker's database-thread CPU) lands exactly the rows the general
path does: the same varied batches -- unicode, tabs, backslashes, newlines, a literal \\N, NULL
words, array elements that need quotes, missing values, several samples, a second revision,
a re-recording of the same placements, a sample twice in a batch, late screenshots -- are
recorded into two copies of one database, one through psycopg's ``write_row`` row by row with
its own list dumper (what recording did before), one as recording does now, and every column
of the four tables is compared. Without a server: the bytes of both paths, and the array
literal against psycopg's list dumper."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg._copy_base import TextFormatter
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import Format
from psycopg.rows import dict_row

from geo_pipeline.connectors.base import Attachment, Citation
from geo_pipeline.evidence import rows as evidence_rows
from geo_pipeline.evidence.recording import (
    prepare_warc_evidence,
    prepare_warc_unparseable,
    record_evidence_batch,
)
from geo_pipeline.evidence.warc_late import record_late_screenshots
from geo_pipeline.evidence.warc_revisions import prepare_warc_screenshot
from geo_pipeline.evidence.warc_store import store_batch
from geo_pipeline.store.queries import Q
from geo_pipeline_tests.fixtures.postgres import create_database, drop_database
from geo_pipeline_tests.integration.evidence.helpers import (
    make_evidence,
    png_bytes,
    seed_sample,
)

ODD_TEXT = (
    'a \\N b\\\\c\td\r\ne "q" {x,y} 咖啡 NULL\x08\x0b\x0c end\\\n\n'
    "\u3000全角\u2028line\u00a0nbsp \\t not a tab"
)
ODD_STRINGS = [
    "", "a", "NULL", "null", "Null ", "NULLs", "\\N", "\\", '"', "a,b", "{", "}", "{}", " ",
    "\t", "\n", "a\nb", "\r", "\x0b", "\x0c", "\x08", "咖啡 性价比", "咖啡", "\u3000", "\u2000",
    "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u1680", "\u00a0", "\u0085",
    "x\\y", 'say "hi"', "SCREENSHOT_UNAVAILABLE", "é", "😀", "a b", "nul", "NULL\n",
]  # fmt: skip


def _write_row_copy(conn: Any, name: str, rows: Iterable[Sequence[Any]]) -> None:
    """The general path: psycopg's ``Copy.write_row`` a row at a time."""
    with conn.cursor() as cur, cur.copy(Q(name)) as copy:
        for row in rows:
            copy.write_row(row)


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence_rows, "_copy", _write_row_copy)
    # The answers' text[] values as lists, for psycopg's list dumper.
    monkeypatch.setattr(evidence_rows, "answer_copy_row", lambda row: row)


def _batches(db: Any, archive: Any) -> list[tuple[str, list[Any]]]:
    """Seeded samples (committed) and the batches to record, stored in ``archive``."""
    refs = [seed_sample(db, policy=p) for p in ("required", "optional", "off", "required")]
    odd = (
        Citation(url="https://example.com/a\\b?x=1\t", id="k\\1", title='t\n"NULL"\r',
                 cited_text="\\N", span_start=0, span_end=3),
        Citation(url="https://例子.cn/路径?q=咖啡 性价比", relation="retrieved", title=""),
        Citation(url="https://Review.Example.com:443/a?utm_source=x#top", id="NULL",
                 title="\\", cited_text="\t"),
    )  # fmt: skip
    shot = Attachment("screenshot", "available", data=png_bytes(64, 96), mime_type="image/png")
    evs = [
        dataclasses.replace(
            make_evidence(refs[0], text=ODD_TEXT, citations=odd, screenshot=shot,
                          warnings=("NULL", "w,1", 'w"2', "\\x", "", "咖啡 性价比")),
            search_queries=tuple(ODD_STRINGS),
        ),
        dataclasses.replace(make_evidence(refs[1], citations=()), search_queries=(),
                            web_search_used=False),
        make_evidence(refs[2], text="plain", warnings=("SCREENSHOT_PENDING",)),
        dataclasses.replace(make_evidence(refs[3], text="\\N"),
                            search_queries=("\u3000", "x\u2028y")),
    ]  # fmt: skip
    policies = ("required", "optional", "off", "required")
    first = store_batch(archive, [prepare_warc_evidence(r, 1, e, p)
                                  for r, e, p in zip(refs, evs, policies, strict=True)])  # fmt: skip
    # Again: the same answer (recorded again: the WARC rows' INSERT path), a changed one (a
    # second revision), one sample twice (two rounds), an unparseable one.
    changed = make_evidence(refs[1], text="a second\trevision\\", warnings=("w",))
    second = store_batch(archive, [
        prepare_warc_evidence(refs[0], 1, evs[0], "required"),
        prepare_warc_evidence(refs[1], 2, changed, "optional"),
        prepare_warc_evidence(refs[2], 2, make_evidence(refs[2], text="r2"), "off"),
        prepare_warc_evidence(refs[2], 3, make_evidence(refs[2], text="r3\n"), "off"),
        prepare_warc_unparseable(refs[3], 2, "up\t\\", b'{"cut', "application/json",
                                 "UNPARSEABLE: cut\\here"),
    ])  # fmt: skip
    late = store_batch(archive, [
        prepare_warc_screenshot(r, 1, dataclasses.replace(shot), answer_record_id=None,
                                captured_at=datetime(2026, 12, 7, 4, 0, 1, 123456, tzinfo=UTC))
        for r in (refs[2], refs[3])
    ])  # type: ignore[arg-type]  # fmt: skip
    return [("answers", first), ("answers", second), ("late", late)]


def _record(url: str, batches: list[tuple[str, list[Any]]]) -> None:
    with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        for kind, items in batches:
            with conn.transaction():
                if kind == "late":
                    record_late_screenshots(conn, items)  # type: ignore[arg-type]
                else:
                    record_evidence_batch(conn, items)


_TABLES = {
    "answers": "sample_id, revision",
    "citations": "sample_id, revision, ordinal",
    "warc_records": "object_key, record_offset",
    "evidence_objects": "sample_id, kind, revision",
}


def _table(url: str, table: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        # Every column, each also as its text (what a type's equality could hide).
        rows = conn.execute(
            f"SELECT t.*, t::text AS as_text FROM geo.{table} t ORDER BY {_TABLES[table]}"  # type: ignore[arg-type]
        ).fetchall()
    # The time of the insert itself (default now()) differs between the two databases.
    return [{k: v for k, v in r.items() if k not in ("stored_at", "as_text")} for r in rows]


def test_the_rows_copied_are_those_of_write_row(
    db_url: str, pg_admin_url: str, local_archive: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        batches = _batches(conn, local_archive)
    # A copy of the seeded database (no connection to its template may be open).
    name = f"geo_t_{uuid.uuid4().hex[:12]}"
    fast = create_database(pg_admin_url, name, template=db_url.rsplit("/", 1)[1])
    try:
        _record(fast, batches)  # as recording does now
        with monkeypatch.context() as m:
            _general(m)
            _record(db_url, batches)  # row by row with write_row
        for table in _TABLES:
            general = _table(db_url, table)
            assert general, table
            assert _table(fast, table) == general, table
        answers = _table(fast, "answers")
        assert len(answers) == 7  # 4, a second revision of 2 samples, a third of one
        assert any(a["search_queries"] == ODD_STRINGS for a in answers)
        assert any(a["raw_text"] == ODD_TEXT for a in answers)
        citations = _table(fast, "citations")
        assert any(c["span_start"] is None and c["cited_text"] is None for c in citations)
        assert any(c["cited_text"] == "\\N" for c in citations)
    finally:
        drop_database(pg_admin_url, name)


# --------------------------------------------------------------------------- without a server
def _write_row_bytes(rows: list[tuple[Any, ...]]) -> bytes:
    """What ``Copy.write_row`` sends for ``rows`` (its formatter, as the copy holds it)."""
    fmt = TextFormatter(Transformer())
    out = b"".join(bytes(fmt.write_row(r)) for r in rows)
    return out + bytes(fmt.end())


def test_copy_data_is_write_rows_bytes() -> None:
    at = datetime(2026, 12, 7, 4, 0, tzinfo=UTC).isoformat()
    rows = [
        (s, None, i, -i, True, False, None, at, [s, "x"], [], ODD_TEXT, "\\N", 2**40)
        for i, s in enumerate(ODD_STRINGS)
    ]
    answer_like = [(*r[:8], evidence_rows.text_array(r[8]), evidence_rows.text_array(r[9]),
                    *r[10:]) for r in rows]  # fmt: skip
    data = evidence_rows.copy_data(Transformer(), answer_like)
    assert bytes(data) == _write_row_bytes(rows)


@pytest.mark.parametrize("items", [
    [], [""], ["NULL"], ["a", "b"], ODD_STRINGS, [s + "x" for s in ODD_STRINGS],
    ["x" + s for s in ODD_STRINGS], [s * 2 for s in ODD_STRINGS],
    *[[s] for s in ODD_STRINGS], ("a", "b"), ["a", None], [1, 2], [["a"]],
])  # fmt: skip
def test_an_array_literal_is_the_list_dumpers(items: Sequence[Any]) -> None:
    as_list = list(items)
    got = evidence_rows.text_array(items)
    if isinstance(got, list):  # an element that is no str: psycopg dumps the list
        assert got == as_list and not all(type(i) is str for i in items)
    else:
        dumped = Transformer().get_dumper(as_list, PyFormat.TEXT).dump(as_list)
        assert got.encode() == bytes(dumped)  # type: ignore[arg-type]
    # What the COPY sends of it, escapes and all.
    data = evidence_rows.copy_data(Transformer(), [(got, "x")])
    assert bytes(data) == _write_row_bytes([(as_list, "x")])


# --------------------------------------------------------------------------- typed dumpers
def _typed_bytes(name: str, rows: list[tuple[Any, ...]]) -> bytes | None:
    """What ``rows._copy`` formats with the COPY's column types (COPY_TYPES), or None when it
    would fall back to the per-value dumpers (a value of another type)."""
    if evidence_rows._odd_typed(name, rows):
        return None
    tx = Transformer()
    tx.set_dumper_types(
        [tx.adapters.types[t].oid for t in evidence_rows.COPY_TYPES[name]], Format.TEXT
    )  # what Copy.set_types does
    try:
        return bytes(evidence_rows.copy_data(tx, rows))
    except (TypeError, psycopg.DataError):
        return None


def _odd_rows(width: int, texts: list[int], ints: list[int], bools: list[int]) -> list[Any]:
    at = datetime(2026, 12, 7, 4, 0, tzinfo=UTC).isoformat()
    rows = []
    for i, s in enumerate([*ODD_STRINGS, None]):
        row: list[Any] = [None] * width
        for c in texts:
            row[c] = s if c % 3 else ODD_TEXT
        for c in ints:
            row[c] = None if s is None else (i * 7919) ** (c % 4 + 1)
        for c in bools:
            row[c] = None if s is None else i % 2 == 0
        row[texts[-1]] = at
        rows.append(tuple(row))
    return rows


_SHAPES = {  # each COPY's row: its text, integer and boolean columns
    name: (
        [i for i, t in enumerate(types) if t == "text"],
        [i for i, t in enumerate(types) if t == "int8"],
        [i for i, t in enumerate(types) if t == "bool"],
    )
    for name, types in evidence_rows.COPY_TYPES.items()
}


@pytest.mark.parametrize("name", sorted(_SHAPES))
def test_the_typed_dumpers_send_the_per_value_dumpers_bytes(name: str) -> None:
    texts, ints, bools = _SHAPES[name]
    rows = _odd_rows(len(evidence_rows.COPY_TYPES[name]), texts, ints, bools)
    assert _typed_bytes(name, rows) == bytes(evidence_rows.copy_data(Transformer(), rows))


@pytest.mark.parametrize("name", sorted(_SHAPES))
@pytest.mark.parametrize("odd", [1, 1.5, True, b"x", ["a"], "t", 2**70])
def test_a_value_of_another_type_is_sent_as_before(name: str, odd: Any) -> None:
    """A value the column's typed dumper would refuse, or write other bytes for (a bool where
    an integer goes; anything but a bool where a boolean goes), sends the per-value bytes
    (the table's rows through psycopg's dumper of each value, as before the typed dumpers)."""
    texts, ints, bools = _SHAPES[name]
    width = len(evidence_rows.COPY_TYPES[name])
    for column in texts + ints + bools:
        rows = _odd_rows(width, texts, ints, bools)
        rows[3] = (*rows[3][:column], odd, *rows[3][column + 1 :])
        before = bytes(evidence_rows.copy_data(Transformer(), rows))
        typed = _typed_bytes(name, rows)
        connector = column in {i for i, _ in evidence_rows._CHECKED.get(name, ())}
        if typed is not None and (connector or column in texts):
            assert typed == before, (column, odd)
        elif typed is not None:
            # recording's own numbers (revisions, offsets, sizes): an int, or a bool that the
            # typed dumper writes as 1 where the server refused 't' before.
            assert typed == before or type(odd) is bool, (column, odd)

"""The derived parts of an answer made without the generic machinery (issue 33: the worker's CPU
per archived answer) are exactly what it made: a NormalisedCitation filled in one step equals the
one its __init__ makes, the citations JSON has json.dumps' bytes (non-ASCII, escapes, None,
numbers; anything unusual goes the generic way), and the content digest is the one hashed from
json.dumps."""

from __future__ import annotations

import dataclasses
import enum
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geo_pipeline.connectors.base import Citation
from geo_pipeline.evidence import recording
from geo_pipeline.evidence.archive import sha256_hex
from geo_pipeline.evidence.recording import NormalisedCitation, citations_json, normalise_citations


def _json_reference(citations: tuple[NormalisedCitation, ...]) -> bytes:
    rows = [dataclasses.asdict(c) for c in citations]
    return json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _digest_reference(text_hex: str, citations_hex: str, provider_truncated: bool) -> str:
    parts = {"text": text_hex, "citations": citations_hex, "provider_truncated": provider_truncated}
    return sha256_hex(json.dumps(parts, sort_keys=True).encode())


_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list('"\\/\x00\x01\x1f\x7f\u2028\u2029\t\n\r\b\f 中é€😀')),
        st.characters(blacklist_categories=("Cs",)),
    ),
    max_size=20,
)
_URLS = st.sampled_from(
    [
        "https://www.zhihu.com/question/c1234567?utm_source=chatgpt.com",
        "https://bücher.de/a b?q=中&spm=1",
        "HTTPS://User:pw@Example.COM:443/a/../b/%7e?gclid=1#!/x",
        "http://[::1]:8080/x",
        "not a url",
        "  https://example.com./a\t  ",
        "https://b.bilibili.com/video/BV1?spm_id_from=333&p=2",
    ]
)
_CITATIONS = st.builds(
    Citation,
    url=st.one_of(_URLS, _TEXT),
    relation=st.sampled_from(["cited", "retrieved"]),
    id=st.one_of(st.none(), _TEXT),
    title=st.one_of(st.none(), _TEXT),
    span_start=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
    span_end=st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
    cited_text=st.one_of(st.none(), _TEXT),
    target_url=st.one_of(st.none(), st.sampled_from(["example.com", "https://a.org/x", "标题"])),
)


def _made_by_init(citations: list[Citation]) -> tuple[NormalisedCitation, ...]:
    return tuple(
        NormalisedCitation(
            ordinal=i, relation=n.relation, raw_url=n.raw_url, normalized_url=n.normalized_url,
            registrable_domain=n.registrable_domain, citation_key=c.id, title=c.title,
            span_start=c.span_start, span_end=c.span_end, cited_text=c.cited_text,
        )
        for i, (c, n) in enumerate(zip(citations, normalise_citations(citations), strict=True))
    )  # fmt: skip


@settings(max_examples=400)
@given(st.lists(_CITATIONS, max_size=6))
def test_citations_and_their_json_are_what_the_generic_path_makes(citations):
    made = normalise_citations(citations)
    by_init = _made_by_init(citations)
    assert made == by_init
    assert [repr(c) for c in made] == [repr(c) for c in by_init]
    assert [c.__dict__ for c in made] == [c.__dict__ for c in by_init]
    assert [hash(c) for c in made] == [hash(c) for c in by_init]
    assert citations_json(made) == _json_reference(made) == _json_reference(by_init)


def test_a_filled_citation_stays_frozen():
    (made,) = normalise_citations([Citation("https://example.com/a")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.title = "x"  # type: ignore[misc]
    assert dataclasses.replace(made, title="x").title == "x"
    assert list(made.__dict__) == [f.name for f in dataclasses.fields(NormalisedCitation)]


class _Str(str):
    pass


class _Num(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    "change",
    [
        {"span_start": True},  # bool: true, not 1
        {"span_end": _Num.ONE},
        {"span_end": 1.5},
        {"title": _Str('t\u2028"')},
        {"ordinal": False},
        {"raw_url": _Str("https://e.com/")},
        {"cited_text": ["a"]},
    ],
)
def test_unusual_field_values_get_json_dumps_bytes(change):
    base = NormalisedCitation(0, "cited", "https://e.com/", "https://e.com/", "e.com", title="标题")
    odd = (base, dataclasses.replace(base, **change))
    assert citations_json(odd) == _json_reference(odd)


def test_lone_surrogates_fail_as_before():
    odd = (NormalisedCitation(0, "cited", "https://e.com/\ud800", "https://e.com/", None),)
    with pytest.raises(UnicodeEncodeError):
        _json_reference(odd)
    with pytest.raises(UnicodeEncodeError):
        citations_json(odd)


@given(st.sampled_from([sha256_hex(b"a"), sha256_hex(b""), "", "ABC", 'x"\u00e9', "0"]),
       st.sampled_from([sha256_hex(b"c"), "", "ff"]), st.sampled_from([True, False, 0, 1]))  # fmt: skip
def test_content_digest_is_the_json_one(text_hex, citations_hex, flag):
    assert recording._content_digest_hex(text_hex, citations_hex, flag) == _digest_reference(
        text_hex, citations_hex, flag
    )


@given(
    st.sampled_from(["stored", "partial", "failed"]),
    st.none() | st.text(max_size=5),
    st.lists(st.text(max_size=5), max_size=3).map(tuple),
    st.integers(0, 9),
    st.sampled_from(["valid", "invalid"]),
    st.booleans(),
    st.lists(st.sampled_from(["answer_raw", "citations", "screenshot"]), max_size=3).map(tuple),
)
def test_an_outcome_made_fast_is_the_dataclass_s(
    state, reason, warnings, rev, validity, new, kinds
):
    made = recording._outcome(state, reason, warnings, rev, validity, new, kinds)
    assert made == recording.EvidenceOutcome(state, reason, warnings, rev, validity, new, kinds)
    assert made.__dict__ == dataclasses.replace(made).__dict__
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.state = "stored"  # type: ignore[misc]


_ODD = st.one_of(
    st.none(), _TEXT, st.integers(-5, 5), st.booleans(), st.just(1.5), st.just(["a"]),
    st.just(_Str("t\u2028")), st.just(_Num.ONE),
)  # fmt: skip


_ODD_CITATIONS = st.builds(
    Citation, url=_URLS, relation=st.one_of(st.sampled_from(["cited"]), _ODD),
    id=_ODD, title=_ODD, span_start=_ODD, span_end=_ODD, cited_text=_ODD,
)  # fmt: skip


@settings(max_examples=400)
@given(
    st.lists(
        st.one_of(
            _CITATIONS,
            _ODD_CITATIONS,
        ),
        max_size=6,
    )
)
def test_citations_with_their_json_in_one_pass_are_the_two_steps(citations):
    """_common's one pass (issue 33) makes what normalise_citations then citations_json make:
    equal objects with the same fields, the same bytes -- or the same error."""
    try:
        want_json: bytes | Exception = citations_json(normalise_citations(citations))
    except (TypeError, ValueError) as exc:  # (e.g. a lone surrogate: UnicodeEncodeError)
        want_json = exc
    try:
        made, cjson = recording._citations_with_json(citations)
    except (TypeError, ValueError) as exc:
        assert type(exc) is type(want_json)
        return
    want = normalise_citations(citations)
    assert made == want
    assert [c.__dict__ for c in made] == [c.__dict__ for c in want]
    assert [list(c.__dict__) for c in made] == [list(c.__dict__) for c in want]
    assert cjson == want_json


def test_citations_with_their_json_on_simulator_answers():
    from geo_pipeline_tests.unit.evidence.test_warc_stored_fields import simulator_evidence

    for _, _, evidence, _ in simulator_evidence(200):
        made, cjson = recording._citations_with_json(evidence.citations)
        assert made == normalise_citations(evidence.citations)
        assert cjson == _json_reference(made)

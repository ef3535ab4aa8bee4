"""R3/R4/R5: Q x T x R expansion, batching within caps, the quote."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import assign_batches, build_plan, expand, quote, sample_id_for

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}


def seed_config(**over):
    c = {
        "tenant": "acme",
        "brand": {"name": "瑞幸"},
        "questions": [f"第{i}个问题：哪家咖啡好？" for i in range(20)],
        "channels": [
            {"platform": "deepseek", "device": "web"},
            {"platform": "deepseek", "device": "app"},
            {"platform": "kimi", "device": "web"},
            {"platform": "qwen", "device": "web"},
        ],
        "repeats": 2,
        "submit_cap": 100,
    }
    c.update(over)
    return normalise_and_validate(c, CAPS)


def test_seed_example_160_samples_in_2_batches():
    n = seed_config()
    samples = expand(n, "run-1")
    assert len(samples) == 20 * 4 * 2 == 160
    assigned, batches = assign_batches(samples, 100, n.platform_caps)
    assert [b.size for b in batches] == [100, 60]
    assert sum(b.size for b in batches) == 160
    assert all(s.batch_no in (0, 1) for s in assigned)


def test_platform_cap_is_respected_within_a_batch():
    n = seed_config(
        channels=[{"platform": "doubao", "device": "web"}, {"platform": "kimi", "device": "web"}]
    )
    samples = expand(n, "run-1")
    _, batches = assign_batches(samples, 100, n.platform_caps)
    assert n.platform_caps["doubao"] == 50
    for b in batches:
        assert b.size <= 100
        assert b.platform_counts.get("doubao", 0) <= 50


def test_retries_do_not_change_identity_but_a_new_run_does():
    n = seed_config()
    a = {s.sample_id for s in expand(n, "run-1")}
    b = {s.sample_id for s in expand(n, "run-1")}
    c = {s.sample_id for s in expand(n, "run-2")}
    assert a == b
    assert not a & c


def test_quote_uses_platform_prices_and_surcharges():
    n = seed_config(
        questions=["q one", "q two"],
        channels=[
            {
                "platform": "deepseek",
                "device": "web",
                "modes": ["deep_thinking"],
                "screenshot": "required",
            },
            {"platform": "doubao", "device": "web", "screenshot": "off"},
        ],
        repeats=1,
        max_attempts=3,
    )
    q = quote(n, PRICES)
    lines = {(line.platform, line.item): (line.unit_price_minor, line.quantity) for line in q.lines}
    assert lines[("deepseek", "base")] == (8, 2)
    assert lines[("deepseek", "deep_thinking")] == (12, 2)
    assert lines[("deepseek", "screenshot")] == (3, 2)
    assert ("deepseek", "retry_allowance") not in lines  # free_after_failure: one charge at most
    assert ("doubao", "screenshot") not in lines
    assert lines[("doubao", "retry_allowance")] == (6, 4)  # charged retries: 2 more attempts each
    assert q.estimated_max.amount_minor == 8 * 2 + 12 * 2 + 3 * 2 + 6 * 2 + 6 * 4
    assert isinstance(q.estimated_max.amount_minor, int)


questions = st.lists(
    st.text(alphabet="咖啡瑞幸abcXYZ ？?　", min_size=2, max_size=12), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(qs=questions, repeats=st.integers(1, 4), cap=st.integers(1, 50))
def test_identities_unique_and_replanning_idempotent(qs, repeats, cap):
    qs = [q for q in qs if q.strip(" 　") and len(q.strip(" 　")) >= 2] or ["fallback question"]
    n = seed_config(questions=qs, repeats=repeats, submit_cap=cap)
    first = expand(n, "r")
    ids = [s.sample_id for s in first]
    identities = [s.identity for s in first]
    assert len(set(ids)) == len(ids) == len(set(identities))
    assert len(first) == len(n.questions) * len(n.targets) * repeats
    a1, b1 = assign_batches(first, cap, n.platform_caps)
    a2, b2 = assign_batches(expand(n, "r"), cap, n.platform_caps)
    assert [tuple(s) for s in a1] == [tuple(s) for s in a2]
    assert b1 == b2
    assert all(b.size <= cap for b in b1)


def _one_by_one(samples, submit_cap, platform_caps):
    """The batching rule as it was first written (one sample at a time): each sample goes to
    the first batch with room for it. The reference the block-wise rule must agree with."""
    sizes, counts, cursor, out = [], [], {}, []
    for s in samples:
        cap_p = max(1, platform_caps.get(s.platform, submit_cap))
        b = cursor.get(s.platform, 0)
        while b < len(sizes) and (sizes[b] >= submit_cap or counts[b].get(s.platform, 0) >= cap_p):
            b += 1
        cursor[s.platform] = b
        if b == len(sizes):
            sizes.append(0)
            counts.append({})
        counts[b][s.platform] = counts[b].get(s.platform, 0) + 1
        sizes[b] += 1
        out.append(b)
    return out, [(b, sizes[b], dict(sorted(c.items()))) for b, c in enumerate(counts)]


channel_sets = st.lists(
    st.sampled_from(
        [
            {"platform": "deepseek", "device": "web"},
            {"platform": "deepseek", "device": "app", "modes": ["standard", "web_search"]},
            {"platform": "doubao", "device": "web", "modes": ["standard", "deep_thinking"]},
            {"platform": "kimi", "device": "web"},
            {"platform": "qwen", "device": "web"},
        ]
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda c: (c["platform"], c["device"]),
)


@settings(max_examples=80, deadline=None)
@given(
    channels=channel_sets,
    n_questions=st.integers(1, 7),
    repeats=st.integers(1, 5),
    cap=st.integers(1, 60),
)
def test_build_plan_batches_as_the_one_by_one_rule(channels, n_questions, repeats, cap):
    """build_plan numbers batches per target in blocks (issue 39: each sample is built once,
    with its batch); the outcome is the one-sample-at-a-time rule's, batch for batch."""
    n = seed_config(
        questions=[f"question number {i}" for i in range(n_questions)],
        channels=channels,
        repeats=repeats,
        submit_cap=cap,
    )
    plan = build_plan(n, quote(n, PRICES), "r-1")
    nos, batches = _one_by_one(expand(n, "r-1"), cap, n.platform_caps)
    assert [s.batch_no for s in plan.samples] == nos
    assert [(b.batch_no, b.size, b.platform_counts) for b in plan.batches] == batches
    assert [s._replace(batch_no=-1) for s in plan.samples] == expand(n, "r-1")
    assert all(s.sample_id == sample_id_for(*s.identity) for s in plan.samples)


def test_a_run_id_with_a_trailing_newline_is_refused():
    """RUN_ID_RE is the CHECK on geo.runs.run_id; Python's '$' also matches before a final
    newline, so `.match` let 'run-1\\n' through to the database (whose CHECK refused it) and to
    the streamed COPY, which does not escape a run id that passed the rule."""
    import pytest

    from geo_pipeline.domain.config_problems import ConfigError

    n = seed_config()
    for bad in ("run-1\n", "run-1\nx", "run 1", ""):
        with pytest.raises(ConfigError, match="is not a run id"):
            build_plan(n, quote(n, PRICES), bad)
    assert len(build_plan(n, quote(n, PRICES), "run-1").samples) == 160

"""The sampling plan: Q x T x R samples with their identity (R3, R5), batches within the
submission caps, and the quote snapshot (R4, R23). Pure: the same snapshot and run id always give
the same plan, which is what makes re-planning idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple, overload

from geo_pipeline.domain.config_model import ChannelTarget, NormalisedConfig, Question
from geo_pipeline.domain.config_problems import ConfigError, Problem
from geo_pipeline.domain.money import Money
from geo_pipeline.domain.platforms import Capabilities, PriceList, channel_key


class PlannedSample(NamedTuple):
    """One sample of the plan (R5). A named tuple, not a dataclass: a 100,000-sample plan builds
    100,000 of them, and a tuple is built ~3x faster than a frozen dataclass (issue 39)."""

    sample_id: str
    run_id: str
    question_revision: str
    question_index: int
    platform: str
    device: str
    region: str
    mode: str
    repeat_index: int
    screenshot_policy: str
    batch_no: int = -1

    @property
    def identity(self) -> tuple[str, str, str, str, str, str, int]:
        return (
            self.run_id,
            self.question_revision,
            self.platform,
            self.device,
            self.region,
            self.mode,
            self.repeat_index,
        )

    @property
    def channel(self) -> str:
        return channel_key(self.platform, self.device)


def _identity_prefix(
    run_id: str, question_revision: str, platform: str, device: str, region: str, mode: str
) -> bytes:
    """The identity's bytes before its repeat index (shared by a question's repeats)."""
    return "\x1f".join([run_id, question_revision, platform, device, region, mode, ""]).encode()


def _sample_id(prefix: bytes, repeat: bytes) -> str:
    return "s" + sha256(prefix + repeat).hexdigest()[:24]


def sample_id_for(
    run_id: str,
    question_revision: str,
    platform: str,
    device: str,
    region: str,
    mode: str,
    repeat_index: int,
) -> str:
    """Deterministic id from the identity of R5 (a retry keeps it; a new run changes it): 's' +
    the first 24 hex digits of the SHA-256 of the identity joined by U+001F -- the rule the
    database checks on every row (constraint sample_id_is_identity_hash, migration 0033)."""
    prefix = _identity_prefix(run_id, question_revision, platform, device, region, mode)
    return _sample_id(prefix, str(repeat_index).encode())


def _target_ids(
    run_id: str, t: ChannelTarget, questions: Sequence[Question], repeats: int
) -> list[str]:
    """The sample ids of one target (T of Q x T x R), by question, then repeat. Each question's
    identity prefix is encoded once for its repeats, and the hash is inline (not a call of
    :func:`_sample_id` per sample: 0.43 us a sample, not 0.67; 100,000 ids are most of a plan's
    Python time)."""
    rbs = [str(r).encode() for r in range(repeats)]
    p, d, g, m = t.platform, t.device, t.region, t.mode
    ids: list[str] = []
    for q in questions:
        prefix = _identity_prefix(run_id, q.revision, p, d, g, m)
        ids += ["s" + sha256(prefix + rb).hexdigest()[:24] for rb in rbs]
    return ids


class PlanSamples(Sequence[PlannedSample]):
    """A plan's samples (Q x T x R, ordered by target, then question, then repeat), built when
    first read (issue 39). ``create_run`` COPYs a 100,000-sample plan channel by channel from
    :meth:`target_ids` while the database inserts the channels before (hashing 100,000 ids took
    ~0.17 s before the COPY started, with the database idle); every id is hashed once and kept,
    so reading the samples afterwards builds the tuples without hashing again. Its length needs
    no sample. Equal to a list of the same samples in the same order."""

    def __init__(
        self, config: NormalisedConfig, run_id: str, batch_nos: list[list[int]] | None = None
    ) -> None:
        self.config, self.run_id = config, run_id
        self._batch_nos = batch_nos
        self._ids: list[list[str] | None] = [None] * len(config.targets)
        self._built: list[PlannedSample] | None = None
        self._len = len(config.targets) * len(config.questions) * config.repeats

    def target_ids(self, ti: int) -> list[str]:
        """The ids of target ``ti``'s samples, in plan order (hashed on the first call only)."""
        ids = self._ids[ti]
        if ids is None:
            c = self.config
            ids = _target_ids(self.run_id, c.targets[ti], c.questions, c.repeats)
            self._ids[ti] = ids
        return ids

    def batch_nos(self, ti: int) -> list[int]:
        """Target ``ti``'s samples' batch numbers, in plan order (-1: not assigned)."""
        if self._batch_nos is None:
            return [-1] * (len(self.config.questions) * self.config.repeats)
        return self._batch_nos[ti]

    def _samples(self) -> list[PlannedSample]:
        if self._built is None:
            new = tuple.__new__  # PlannedSample(...) without its Python-level __new__ frame
            c, run_id, reps = self.config, self.run_id, range(self.config.repeats)
            out: list[PlannedSample] = []
            for ti, t in enumerate(c.targets):
                ids, nos = iter(self.target_ids(ti)), iter(self.batch_nos(ti))
                p, d, g, m, shot = t.platform, t.device, t.region, t.mode, t.screenshot
                for qi, q in enumerate(c.questions):
                    row = (run_id, q.revision, qi, p, d, g, m)
                    out += [new(PlannedSample, (next(ids), *row, r, shot, next(nos))) for r in reps]
            self._built = out
        return self._built

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> PlannedSample: ...
    @overload
    def __getitem__(self, i: slice) -> list[PlannedSample]: ...
    def __getitem__(self, i: int | slice) -> PlannedSample | list[PlannedSample]:
        return self._samples()[i]

    def __iter__(self) -> Iterator[PlannedSample]:
        return iter(self._samples())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlanSamples | list):
            return len(self) == len(other) and self._samples() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PlanSamples({self.run_id!r}, {self._len} samples)"


def _expand(
    config: NormalisedConfig, run_id: str, batch_nos: list[list[int]] | None = None
) -> list[PlannedSample]:
    """Q x T x R, ordered by target, then question, then repeat; ``batch_nos``: each target's
    samples' batch numbers, in that order (else -1)."""
    return PlanSamples(config, run_id, batch_nos)._samples()


def expand(config: NormalisedConfig, run_id: str) -> list[PlannedSample]:
    """Q x T x R, ordered by target, then question, then repeat (batch numbers not assigned)."""
    return _expand(config, run_id)


@dataclass(frozen=True)
class Batch:
    batch_no: int
    size: int
    platform_counts: dict[str, int]


def _batch_runs(
    runs: Iterable[tuple[str, int]], submit_cap: int, platform_caps: Mapping[str, int]
) -> tuple[list[list[int]], list[Batch]]:
    """THE batching rule, over runs of consecutive samples of one platform (a target's samples
    are one run): each sample goes to the first batch with room for it -- at most
    ``submit_cap`` samples, and at most the platform's own cap of that platform's samples. With
    one cap of 100, 160 samples -> 2 batches. Returns each run's batch numbers, and the batches.

    Batches only ever fill up, so a per-platform cursor (the first batch that may still take
    that platform) keeps this linear, and a run fills a batch's room in one step."""
    if submit_cap < 1:
        raise ValueError("submit_cap must be at least 1")
    counts: list[Counter[str]] = []
    sizes: list[int] = []
    cursor: dict[str, int] = {}
    out: list[list[int]] = []
    for platform, n in runs:
        cap_p = max(1, platform_caps.get(platform, submit_cap))
        b = cursor.get(platform, 0)
        nos: list[int] = []
        while n:
            if b == len(sizes):
                counts.append(Counter())
                sizes.append(0)
            take = min(n, submit_cap - sizes[b], cap_p - counts[b][platform])
            if take <= 0:
                b += 1
                continue
            counts[b][platform] += take
            sizes[b] += take
            nos += [b] * take
            n -= take
        cursor[platform] = b
        out.append(nos)
    batches = [Batch(b, sizes[b], dict(sorted(c.items()))) for b, c in enumerate(counts)]
    return out, batches


def assign_batches(
    samples: list[PlannedSample], submit_cap: int, platform_caps: Mapping[str, int]
) -> tuple[list[PlannedSample], list[Batch]]:
    """Deterministic split of ``samples`` (in their order) into batches by :func:`_batch_runs`."""
    runs = [(p, len(list(g))) for p, g in groupby(samples, key=attrgetter("platform"))]
    nos, batches = _batch_runs(runs, submit_cap, platform_caps)
    flat = [b for run in nos for b in run]
    return [s._replace(batch_no=b) for s, b in zip(samples, flat, strict=True)], batches


# --------------------------------------------------------------------------- quote (R4, R23)
@dataclass(frozen=True)
class QuoteLine:
    platform: str
    price_version: str
    item: str
    mode: str
    unit_price_minor: int
    quantity: int

    @property
    def amount_minor(self) -> int:
        return self.unit_price_minor * self.quantity


@dataclass(frozen=True)
class Quote:
    currency: str
    lines: tuple[QuoteLine, ...]
    price_versions: dict[str, str]
    # Part of the quote's identity: two tenants quoted the same plan get two snapshots, each
    # theirs (one shared row would show one tenant's quote under the other's run).
    tenant: str = ""

    @property
    def estimated_max(self) -> Money:
        return Money(sum(line.amount_minor for line in self.lines), self.currency)

    @property
    def quote_id(self) -> str:
        body = json.dumps(
            {
                "tenant": self.tenant,
                "currency": self.currency,
                "versions": self.price_versions,
                "lines": [line.__dict__ for line in self.lines],
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(body.encode()).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        return {
            "quote_id": self.quote_id,
            "currency": self.currency,
            "estimated_max_minor": self.estimated_max.amount_minor,
            "price_versions": self.price_versions,
            "lines": [dict(line.__dict__, amount_minor=line.amount_minor) for line in self.lines],
        }


class QuoteError(ValueError):
    pass


def quote(config: NormalisedConfig, prices: Mapping[str, PriceList]) -> Quote:
    """The price of the plan from the platforms' own price lists (R4): a base price per mode,
    surcharges only for what the mode or screenshot policy will use, and a retry allowance on
    platforms that charge retries (R15), so ``estimated_max`` is a true upper bound."""
    currencies = {prices[t.platform].currency for t in config.targets}
    if len(currencies) != 1:
        raise QuoteError(
            f"the channels' price lists are in several currencies {sorted(currencies)}; "
            "a run is quoted in one currency"
        )
    currency = currencies.pop()
    per_target = Counter()  # type: Counter[tuple[str, str, str]]
    n_per_target = len(config.questions) * config.repeats
    for t in config.targets:
        per_target[(t.platform, t.mode, t.screenshot)] += n_per_target
    lines: list[QuoteLine] = []
    for (platform, mode, shot), n in sorted(per_target.items()):
        p = prices[platform]
        if mode not in p.base:
            raise QuoteError(
                f"{platform} price list {p.version} has no base price for mode {mode!r}"
            )
        attempts = config.max_attempts if p.retry_fee_rule == "charged" else 1
        unit = p.base[mode]
        lines.append(QuoteLine(platform, p.version, "base", mode, unit, n))
        if mode == "deep_thinking" and p.deep_thinking:
            lines.append(QuoteLine(platform, p.version, "deep_thinking", mode, p.deep_thinking, n))
            unit += p.deep_thinking
        if mode == "web_search" and p.web_search:
            lines.append(QuoteLine(platform, p.version, "web_search", mode, p.web_search, n))
            unit += p.web_search
        if shot != "off" and p.screenshot:
            lines.append(QuoteLine(platform, p.version, "screenshot", mode, p.screenshot, n))
            unit += p.screenshot
        if attempts > 1:
            lines.append(
                QuoteLine(platform, p.version, "retry_allowance", mode, unit, n * (attempts - 1))
            )
    versions = {t.platform: prices[t.platform].version for t in config.targets}
    return Quote(currency, tuple(lines), dict(sorted(versions.items())), config.tenant)


# --------------------------------------------------------------------------- the plan of a run
@dataclass(frozen=True)
class Plan:
    """Everything a run is created from: its validated config, quote, samples and batches."""

    run_id: str
    config: NormalisedConfig
    quote: Quote
    # A PlanSamples from build_plan (built when first read); any sequence of samples otherwise.
    samples: Sequence[PlannedSample]
    batches: list[Batch]

    def summary(self) -> dict[str, Any]:
        c = self.config
        per_channel: dict[str, int] = {}  # from the targets: the samples need not be built
        for t in c.targets:
            key = channel_key(t.platform, t.device)
            per_channel[key] = per_channel.get(key, 0) + len(c.questions) * c.repeats
        return {
            "run_id": self.run_id,
            "tenant": c.tenant,
            "snapshot_id": c.snapshot_id,
            "questions": len(c.questions),
            "targets": len(c.targets),
            "repeats": c.repeats,
            "samples": len(self.samples),
            "formula": f"{len(c.questions)} x {len(c.targets)} x {c.repeats} = {len(self.samples)}",
            "channels": per_channel,
            "batches": [
                {"batch_no": b.batch_no, "size": b.size, "platform_counts": b.platform_counts}
                for b in self.batches
            ],
            "submit_cap": c.submit_cap,
            "duplicates_removed": [str(p) for p in c.duplicates],
            "quote": self.quote.as_dict(),
        }


# A run id is also a Dagster dynamic partition key: no '|', ',', '[' or ']' (docs/design.md
# section 5); the same rule is the CHECK on geo.runs.run_id. Used with fullmatch: Python's '$'
# also matches before a final newline, which the database's CHECK refuses.
RUN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def plan_for(config: NormalisedConfig, caps: Mapping[str, Capabilities], run_id: str) -> Plan:
    """Quote a validated config with its platforms' prices (R4) and expand it (R3)."""
    return build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)


def build_plan(config: NormalisedConfig, quote: Quote, run_id: str) -> Plan:
    if not RUN_ID_RE.fullmatch(run_id):
        raise ConfigError(
            [
                Problem(
                    "run_id", f"{run_id!r} is not a run id: use 1-64 of A-Z, a-z, 0-9, '_' or '-'"
                )
            ]
        )
    # Batch numbers first (per target), so each sample is built once, with its batch.
    block = len(config.questions) * config.repeats
    nos, batches = _batch_runs(
        [(t.platform, block) for t in config.targets], config.submit_cap, config.platform_caps
    )
    return Plan(run_id, config, quote, PlanSamples(config, run_id, nos), batches)

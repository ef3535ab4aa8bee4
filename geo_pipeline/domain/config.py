"""The collection config a user fills in, its normalisation (R1) and its validation.

Validation reports every problem at once, each with its field path, the value and what is
allowed, so a person can fix a config in one pass. Normalisation is NFKC + trim, and exact
duplicate questions are removed and reported (not an error).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from geo_pipeline.domain.platforms import Capabilities, channel_key

MAX_QUESTIONS = 500
MAX_QUESTION_CHARS = 500
MIN_QUESTION_CHARS = 2
MAX_REPEATS = 20
MAX_ATTEMPTS_LIMIT = 10
# How long after its creation a run's partitions wait for their last samples before they publish
# what is terminal and list the rest as excluded. The upper bound keeps the deadline inside the
# window the completion sensor sweeps (PipelineSettingsResource.recent_run_days, 7 by default).
DEFAULT_PUBLISH_DEADLINE_SECONDS = 6 * 3600
MIN_PUBLISH_DEADLINE_SECONDS = 60
MAX_PUBLISH_DEADLINE_SECONDS = 7 * 86400
SCREENSHOT_POLICIES = ("required", "optional", "off")
TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MONITOR_RE = re.compile(r"^[A-Za-z0-9_-]{1,48}$")

ScreenshotPolicy = Literal["required", "optional", "off"]


# --------------------------------------------------------------------------- raw input model
class BrandIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    aliases: list[str] = []
    domains: list[str] = []


class ChannelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: str
    device: str
    regions: list[str] | None = None
    modes: list[str] | None = None
    screenshot: str | None = None  # overrides the config-wide policy for this channel


class CollectionConfig(BaseModel):
    """What the user filled in (the same model feeds the CLI and the Dagster launchpad)."""

    model_config = ConfigDict(extra="forbid")
    tenant: str
    monitor: str | None = None
    brand: BrandIn
    competitors: list[BrandIn] = []
    questions: list[str]
    channels: list[ChannelIn]
    repeats: int = 1
    screenshot: str = "optional"
    priority: int = 5
    submit_cap: int = 100
    max_attempts: int = 3
    publish_deadline_seconds: int = DEFAULT_PUBLISH_DEADLINE_SECONDS


# --------------------------------------------------------------------------- problems
@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(ValueError):
    """Every problem of a config, each with its field path."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        n = len(problems)
        super().__init__(
            f"invalid collection config ({n} problem{'' if n == 1 else 's'}):\n{lines}"
        )


# --------------------------------------------------------------------------- normalised model
@dataclass(frozen=True)
class Brand:
    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class Question:
    revision: str
    text: str


@dataclass(frozen=True)
class ChannelTarget:
    """One T of Q x T x R: platform, device, region, mode, with its screenshot policy."""

    platform: str
    device: str
    region: str
    mode: str
    screenshot: ScreenshotPolicy

    @property
    def channel(self) -> str:
        return channel_key(self.platform, self.device)


@dataclass(frozen=True)
class NormalisedConfig:
    tenant: str
    monitor: str | None
    brand: Brand
    competitors: tuple[Brand, ...]
    questions: tuple[Question, ...]
    targets: tuple[ChannelTarget, ...]
    repeats: int
    priority: int
    submit_cap: int
    max_attempts: int
    platform_caps: Mapping[str, int]
    publish_deadline_seconds: int = DEFAULT_PUBLISH_DEADLINE_SECONDS
    # Reported, not errors: exact duplicates removed by normalisation (R1).
    duplicates: tuple[Problem, ...] = field(default=(), compare=False)

    def canonical(self) -> dict[str, Any]:
        """The content that is frozen and hashed into the config snapshot (R2)."""
        data = asdict(self)
        data.pop("duplicates")
        data["platform_caps"] = dict(sorted(self.platform_caps.items()))
        return data

    def canonical_json(self) -> str:
        return json.dumps(
            self.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )

    @property
    def snapshot_id(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    @property
    def channels(self) -> list[str]:
        return sorted({t.channel for t in self.targets})

    @staticmethod
    def from_canonical(data: Mapping[str, Any]) -> NormalisedConfig:
        """Rebuild from a stored snapshot (execution reads this, never the editable config)."""
        return NormalisedConfig(
            tenant=data["tenant"],
            monitor=data.get("monitor"),
            brand=_brand_from(data["brand"]),
            competitors=tuple(_brand_from(b) for b in data["competitors"]),
            questions=tuple(Question(q["revision"], q["text"]) for q in data["questions"]),
            targets=tuple(ChannelTarget(**t) for t in data["targets"]),
            repeats=int(data["repeats"]),
            priority=int(data["priority"]),
            submit_cap=int(data["submit_cap"]),
            max_attempts=int(data["max_attempts"]),
            platform_caps=dict(data["platform_caps"]),
            # Snapshots frozen before the deadline existed publish on the default (the same
            # fallback as the SQL view geo.run_publish_deadlines).
            publish_deadline_seconds=int(
                data.get("publish_deadline_seconds", DEFAULT_PUBLISH_DEADLINE_SECONDS)
            ),
        )


def _brand_from(data: Mapping[str, Any]) -> Brand:
    return Brand(data["name"], tuple(data["aliases"]), tuple(data["domains"]))


# --------------------------------------------------------------------------- normalisation
def control_char(text: str) -> str | None:
    """The first control character left in normalised text, as U+XXXX (PostgreSQL cannot store
    U+0000 and no engine should be asked one); None if there is none."""
    for ch in text:
        if unicodedata.category(ch) == "Cc":
            return f"U+{ord(ch):04X}"
    return None


def normalise_text(text: str) -> str:
    """NFKC (full-width -> half-width, compatibility forms) and trimmed, inner runs of
    whitespace collapsed to one space."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def question_revision(text: str) -> str:
    """Content address of a normalised question: editing the text makes a new revision."""
    return "q" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def _normalise_domain(domain: str) -> str:
    d = normalise_text(domain).lower()
    d = re.sub(r"^[a-z]+://", "", d).split("/")[0]
    return d.removeprefix("www.").rstrip(".")


def _unique(items: list[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return tuple(seen)


# --------------------------------------------------------------------------- load + validate
class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error: the last value
    silently winning would run a config its author never wrote."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(p), f"cannot read config file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [Problem(str(p), f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at {exc.start})")]
        ) from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.load(text, _StrictLoader)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(
            [Problem(str(p), f"not valid {p.suffix.lstrip('.') or 'YAML'}: {exc}")]
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem("(root)", f"expected a mapping of fields, got {type(data).__name__}")]
        )
    return data


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def parse_config(raw: Mapping[str, Any] | CollectionConfig) -> CollectionConfig:
    if isinstance(raw, CollectionConfig):
        return raw
    try:
        return CollectionConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; see the example config)"
            elif "input" in err and err["type"] != "missing":
                msg = f"{msg} (got {err['input']!r})"
            problems.append(Problem(_loc(tuple(err["loc"])), msg))
        raise ConfigError(problems) from None


def normalise_and_validate(
    raw: Mapping[str, Any] | CollectionConfig, platforms: Mapping[str, Capabilities]
) -> NormalisedConfig:
    """Normalise (R1) and validate against the platforms' capabilities (R16).

    Raises ConfigError listing every problem; returns the normalised config otherwise.
    """
    cfg = parse_config(raw)
    problems: list[Problem] = []
    duplicates: list[Problem] = []

    tenant = normalise_text(cfg.tenant)
    if not TENANT_RE.match(tenant):
        problems.append(
            Problem(
                "tenant",
                f"{cfg.tenant!r} is not a tenant id: use 1-63 of "
                "a-z, 0-9, '_' or '-', starting with a letter or digit",
            )
        )
    monitor = normalise_text(cfg.monitor) if cfg.monitor is not None else None
    if monitor is not None and not MONITOR_RE.match(monitor):
        problems.append(
            Problem(
                "monitor",
                f"{cfg.monitor!r} is not a monitor id: use 1-48 of A-Z, a-z, 0-9, '_' or '-'",
            )
        )

    def brand(b: BrandIn, path: str) -> Brand:
        name = normalise_text(b.name)
        if not name:
            problems.append(Problem(f"{path}.name", "brand name is empty"))
        for field_path, value in [(f"{path}.name", name)] + [
            (f"{path}.aliases[{i}]", normalise_text(a)) for i, a in enumerate(b.aliases)
        ]:
            if bad := control_char(value):
                problems.append(Problem(field_path, f"contains control character {bad}; remove it"))
        aliases = _unique([normalise_text(a) for a in b.aliases])
        aliases = tuple(a for a in aliases if a != name)
        for i, a in enumerate(b.aliases):
            if not normalise_text(a):
                problems.append(Problem(f"{path}.aliases[{i}]", "alias is empty"))
        domains = _unique([_normalise_domain(d) for d in b.domains])
        for i, d in enumerate(domains):
            if "." not in d or " " in d:
                problems.append(
                    Problem(f"{path}.domains[{i}]", f"{d!r} is not a domain name like example.com")
                )
        return Brand(name, aliases, domains)

    target_brand = brand(cfg.brand, "brand")
    competitors = tuple(brand(c, f"competitors[{i}]") for i, c in enumerate(cfg.competitors))
    seen_brands: dict[str, str] = {}
    for path, b in [("brand", target_brand)] + [
        (f"competitors[{i}]", c) for i, c in enumerate(competitors)
    ]:
        for n in b.names:
            key = n.casefold()
            if key in seen_brands and seen_brands[key] != path:
                problems.append(
                    Problem(
                        f"{path}",
                        f"name or alias {n!r} is also used by "
                        f"{seen_brands[key]}; each name must identify one brand",
                    )
                )
            seen_brands.setdefault(key, path)

    # Questions: trim + NFKC, exact duplicates removed and reported, then length and count.
    questions: list[Question] = []
    first_seen: dict[str, int] = {}
    for i, q in enumerate(cfg.questions):
        text = normalise_text(q)
        if not text:
            problems.append(Problem(f"questions[{i}]", "question is empty after trimming"))
            continue
        if bad := control_char(text):
            problems.append(
                Problem(f"questions[{i}]", f"contains control character {bad}; remove it")
            )
            continue
        if len(text) < MIN_QUESTION_CHARS:
            problems.append(
                Problem(
                    f"questions[{i}]",
                    f"question {text!r} is too short (at least {MIN_QUESTION_CHARS} characters)",
                )
            )
            continue
        if len(text) > MAX_QUESTION_CHARS:
            problems.append(
                Problem(
                    f"questions[{i}]",
                    f"question has {len(text)} characters; "
                    f"at most {MAX_QUESTION_CHARS} are allowed",
                )
            )
            continue
        if text in first_seen:
            duplicates.append(
                Problem(f"questions[{i}]", f"duplicate of questions[{first_seen[text]}], removed")
            )
            continue
        first_seen[text] = i
        questions.append(Question(question_revision(text), text))
    if not cfg.questions:
        problems.append(Problem("questions", "at least one question is required"))
    elif len(questions) > MAX_QUESTIONS:
        problems.append(
            Problem(
                "questions",
                f"{len(questions)} distinct questions; at most {MAX_QUESTIONS} are allowed per run",
            )
        )

    default_policy = cfg.screenshot
    if default_policy not in SCREENSHOT_POLICIES:
        problems.append(
            Problem(
                "screenshot",
                f"{default_policy!r} is not a screenshot policy; "
                f"allowed: {', '.join(SCREENSHOT_POLICIES)}",
            )
        )
    if not (1 <= cfg.repeats <= MAX_REPEATS):
        problems.append(
            Problem("repeats", f"{cfg.repeats} is out of range; allowed 1..{MAX_REPEATS}")
        )
    if not (0 <= cfg.priority <= 9):
        problems.append(Problem("priority", f"{cfg.priority} is out of range; allowed 0..9"))
    if cfg.submit_cap < 1:
        problems.append(Problem("submit_cap", f"{cfg.submit_cap} must be at least 1"))
    if not (1 <= cfg.max_attempts <= MAX_ATTEMPTS_LIMIT):
        problems.append(
            Problem(
                "max_attempts",
                f"{cfg.max_attempts} is out of range; allowed 1..{MAX_ATTEMPTS_LIMIT}",
            )
        )
    if not (
        MIN_PUBLISH_DEADLINE_SECONDS <= cfg.publish_deadline_seconds <= MAX_PUBLISH_DEADLINE_SECONDS
    ):
        problems.append(
            Problem(
                "publish_deadline_seconds",
                f"{cfg.publish_deadline_seconds} is out of range; allowed "
                f"{MIN_PUBLISH_DEADLINE_SECONDS}..{MAX_PUBLISH_DEADLINE_SECONDS} seconds "
                "(1 minute to 7 days after the run's creation)",
            )
        )

    targets: list[ChannelTarget] = []
    platform_caps: dict[str, int] = {}
    if not cfg.channels:
        problems.append(Problem("channels", "at least one channel (platform x device) is required"))
    seen_targets: set[tuple[str, str, str, str]] = set()
    target_key: tuple[str, str, str, str]
    for i, ch in enumerate(cfg.channels):
        path = f"channels[{i}]"
        platform = normalise_text(ch.platform).lower()
        device = normalise_text(ch.device).lower()
        caps = platforms.get(platform)
        if caps is None:
            problems.append(
                Problem(
                    f"{path}.platform",
                    f"unknown platform {ch.platform!r}; "
                    f"known: {', '.join(sorted(platforms)) or '(none registered)'}",
                )
            )
            continue
        platform_caps[platform] = caps.submit_cap
        if device not in caps.devices:
            problems.append(
                Problem(
                    f"{path}.device",
                    f"device {ch.device!r} is not supported by "
                    f"{platform}; supported: {', '.join(caps.devices)}",
                )
            )
        regions = [normalise_text(r).lower() for r in (ch.regions or [caps.regions[0]])]
        for j, r in enumerate(regions):
            if r not in caps.regions:
                problems.append(
                    Problem(
                        f"{path}.regions[{j}]",
                        f"region {r!r} is not supported "
                        f"by {platform}; supported: {', '.join(caps.regions)}",
                    )
                )
        modes = [normalise_text(m).lower() for m in (ch.modes or ["standard"])]
        for j, m in enumerate(modes):
            if m not in caps.modes:
                problems.append(
                    Problem(
                        f"{path}.modes[{j}]",
                        f"mode {m!r} is not supported by "
                        f"{platform}; supported: {', '.join(caps.modes)}",
                    )
                )
        policy = ch.screenshot if ch.screenshot is not None else default_policy
        if ch.screenshot is not None and policy not in SCREENSHOT_POLICIES:
            problems.append(
                Problem(
                    f"{path}.screenshot",
                    f"{policy!r} is not a screenshot "
                    f"policy; allowed: {', '.join(SCREENSHOT_POLICIES)}",
                )
            )
        elif policy == "required" and not caps.screenshot:
            problems.append(
                Problem(
                    f"{path}.screenshot",
                    f"screenshots are required but "
                    f"{platform} cannot provide them; use 'optional' or 'off'",
                )
            )
        for r in regions:
            for m in modes:
                target_key = (platform, device, r, m)
                if target_key in seen_targets:
                    problems.append(Problem(path, f"{platform}/{device}/{r}/{m} is listed twice"))
                    continue
                seen_targets.add(target_key)
                shot: ScreenshotPolicy = policy if policy in SCREENSHOT_POLICIES else "off"  # type: ignore[assignment]
                targets.append(ChannelTarget(platform, device, r, m, shot))

    if problems:
        raise ConfigError(problems)
    return NormalisedConfig(
        tenant=tenant,
        monitor=monitor,
        brand=target_brand,
        competitors=competitors,
        questions=tuple(questions),
        targets=tuple(targets),
        repeats=cfg.repeats,
        priority=cfg.priority,
        submit_cap=cfg.submit_cap,
        max_attempts=cfg.max_attempts,
        platform_caps=platform_caps,
        publish_deadline_seconds=cfg.publish_deadline_seconds,
        duplicates=tuple(duplicates),
    )

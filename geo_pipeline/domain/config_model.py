"""The collection config's two shapes: what a person fills in (pydantic models, bounded as written;
the same models feed the CLI and the Dagster launchpad) and the normalised config that is frozen
and hashed into a run's snapshot (R2). Their limits live here; the checks in domain/config.py."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from geo_pipeline.domain.config_problems import Problem
from geo_pipeline.domain.platforms import channel_key

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
# Bounds on the input itself: generous for any real config, small enough that a hostile one is
# refused in milliseconds. A valid config nests 4 levels (channels[0].regions[0]).
MAX_NAME_CHARS = 200  # a brand or competitor name, an alias
MAX_ALIASES = 50
MAX_DOMAINS = 50
MAX_DOMAIN_CHARS = 253
MAX_COMPETITORS = 50
MAX_QUESTION_ENTRIES = 2 * MAX_QUESTIONS  # as written, duplicates included
MAX_QUESTION_INPUT_CHARS = 4 * MAX_QUESTION_CHARS  # as written, before trimming
MAX_CHANNELS = 100
MAX_CHANNEL_OPTIONS = 20  # regions or modes of one channel
MAX_ID_CHARS = 200  # tenant, monitor, platform, device, region, mode, screenshot policy
TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MONITOR_RE = re.compile(r"^[A-Za-z0-9_-]{1,48}$")

ScreenshotPolicy = Literal["required", "optional", "off"]


# --------------------------------------------------------------------------- raw input model
# Strings bounded as written; the normalised text is checked again where normalisation can grow
# it (NFKC expands some characters to several).
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Ident = Annotated[str, Field(max_length=MAX_ID_CHARS)]
Domain = Annotated[str, Field(max_length=MAX_DOMAIN_CHARS)]
QuestionText = Annotated[str, Field(max_length=MAX_QUESTION_INPUT_CHARS)]


class BrandIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    aliases: list[Name] = Field(default=[], max_length=MAX_ALIASES)
    domains: list[Domain] = Field(default=[], max_length=MAX_DOMAINS)


class ChannelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    platform: Ident
    device: Ident
    regions: list[Ident] | None = Field(default=None, max_length=MAX_CHANNEL_OPTIONS)
    modes: list[Ident] | None = Field(default=None, max_length=MAX_CHANNEL_OPTIONS)
    screenshot: Ident | None = None  # overrides the config-wide policy for this channel


class CollectionConfig(BaseModel):
    """What the user filled in (the same model feeds the CLI and the Dagster launchpad)."""

    model_config = ConfigDict(extra="forbid")
    tenant: Ident
    monitor: Ident | None = None
    brand: BrandIn
    competitors: list[BrandIn] = Field(default=[], max_length=MAX_COMPETITORS)
    questions: list[QuestionText] = Field(max_length=MAX_QUESTION_ENTRIES)
    channels: list[ChannelIn] = Field(max_length=MAX_CHANNELS)
    repeats: int = 1
    screenshot: Ident = "optional"
    priority: int = 5
    submit_cap: int = 100
    max_attempts: int = 3
    publish_deadline_seconds: int = DEFAULT_PUBLISH_DEADLINE_SECONDS
    # question (as written) -> {topic, intent, persona, market}: domain/question_tags.py
    question_tags: dict[QuestionText, dict[str, Any]] | None = None


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
    # question revision -> its tags (domain/question_tags.py); frozen with the questions (R2)
    question_tags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Reported, not errors: exact duplicates removed by normalisation (R1).
    duplicates: tuple[Problem, ...] = field(default=(), compare=False)

    def canonical(self) -> dict[str, Any]:
        """The content that is frozen and hashed into the config snapshot (R2)."""
        data = asdict(self)
        data.pop("duplicates")
        if not data["question_tags"]:
            data.pop("question_tags")  # untagged configs keep the snapshot ids they had
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
            question_tags={k: dict(v) for k, v in data.get("question_tags", {}).items()},
        )


def _brand_from(data: Mapping[str, Any]) -> Brand:
    return Brand(data["name"], tuple(data["aliases"]), tuple(data["domains"]))

"""The collection config a user fills in, its normalisation (R1) and its validation.

Validation reports every problem at once, each with its field path, a short prefix of the value
and what is allowed, so a person can fix a config in one pass: a type error does not hide the
other problems. Normalisation is NFKC + trim, and exact duplicate questions are removed and
reported (not an error).

A config is input from people and from the launchpad, so every dimension of it is bounded before
anything walks it: the file's size, YAML aliases (a "billion laughs" expands a few lines into
billions of values), nesting depth, list lengths and string lengths. Error messages echo at most a
short escaped prefix of a value, never the value itself.
"""

from __future__ import annotations

import copy
import types
import unicodedata
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from geo_pipeline.domain.config_loading import check_shape
from geo_pipeline.domain.config_model import (
    MAX_ATTEMPTS_LIMIT,
    MAX_NAME_CHARS,
    MAX_PUBLISH_DEADLINE_SECONDS,
    MAX_QUESTION_CHARS,
    MAX_QUESTIONS,
    MAX_REPEATS,
    MIN_PUBLISH_DEADLINE_SECONDS,
    MIN_QUESTION_CHARS,
    MONITOR_RE,
    SCREENSHOT_POLICIES,
    TENANT_RE,
    Brand,
    BrandIn,
    ChannelTarget,
    CollectionConfig,
    NormalisedConfig,
    Question,
    ScreenshotPolicy,
)
from geo_pipeline.domain.config_problems import ConfigError, Problem, field_path, shown
from geo_pipeline.domain.config_text import (
    control_char,
    invisible_problem,
    is_invisible,
    normalise_domain,
    normalise_text,
    question_revision,
    unique_in_order,
)
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.domain.question_tags import validate_tags


def _type_message(err: Any) -> str:
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see the example config)"
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_type", "dict_type"):
        return f"expected a mapping of fields (got {shown(value)})"
    if kind == "string_too_long":
        return f"{shown(value)} is too long; at most {ctx.get('max_length')} characters are allowed"
    if kind == "too_long":
        n = len(value) if isinstance(value, list | tuple) else ctx.get("actual_length")
        return f"has {n} entries; at most {ctx.get('max_length')} are allowed"
    return f"{err['msg']} (got {shown(value)})"


def _annotation_at(loc: tuple[Any, ...]) -> Any:
    """The declared type of the field at a pydantic error location (Annotated and Optional
    removed), to build a stand-in value for it."""
    ann: Any = CollectionConfig
    for part in loc:
        if isinstance(part, int):
            ann = get_args(ann)[0]
        else:
            ann = ann.model_fields[part].annotation
        while True:
            if get_origin(ann) is Annotated:
                ann = get_args(ann)[0]
            elif get_origin(ann) in (Union, types.UnionType):
                ann = next(a for a in get_args(ann) if a is not type(None))
            else:
                break
    return ann


def _stand_in(loc: tuple[Any, ...]) -> Any:
    """A value of the right type for a field that failed its type check, so the rest of the
    config can still be validated. Strings are unique and start with U+0000: any problem the
    checks find in them is at the failed field's own path, and that path's problems are dropped
    (its type error already says what is wrong)."""
    ann = _annotation_at(loc)
    if ann is str:
        return f"\x00{field_path(loc)}"
    if ann is int:
        return 1
    if get_origin(ann) is list:
        return []
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return {
            name: _stand_in((*loc, name)) for name, f in ann.model_fields.items() if f.is_required()
        }
    raise TypeError(f"no stand-in for {ann!r}")  # the model grew a type this does not know


def _replace_failed(data: Any, loc: tuple[Any, ...], kind: str) -> bool:
    """Remove an unknown field, drop a failed optional one (its default applies) or put a
    stand-in in place of a failed required one or list entry. False when it cannot."""
    if not loc:
        return False
    parent = data
    for part in loc[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = loc[-1]
    try:
        if kind == "extra_forbidden":
            del parent[last]
            return True
        if isinstance(parent, dict) and isinstance(last, str):
            model = _annotation_at(loc[:-1])
            if not model.model_fields[last].is_required():
                parent.pop(last, None)
                return True
        parent[last] = _stand_in(loc)
    except (KeyError, IndexError, TypeError, AttributeError, StopIteration):
        return False
    return True


def _parse(raw: Mapping[str, Any]) -> tuple[CollectionConfig | None, list[Problem], set[str]]:
    """The model parsed from raw data, with every type problem, each with its path; failed
    fields are replaced by stand-ins so the checks of :func:`normalise_and_validate` still run
    on the rest. Returns the config (None when stand-ins cannot make it parse), the problems and
    the paths that failed."""
    problems: list[Problem] = []
    failed: set[str] = set()
    data: Any = raw
    for _ in range(4):  # a stand-in model can fail one level further down; 4 levels at most
        try:
            return CollectionConfig.model_validate(data), problems, failed
        except ValidationError as exc:
            if data is raw:
                data = copy.deepcopy(dict(raw))  # bounded by _check_shape
            replaced = True
            for err in exc.errors(include_url=False):
                loc = tuple(err["loc"])
                path = field_path(loc)
                if path not in failed:
                    problems.append(Problem(path, _type_message(err)))
                    failed.add(path)
                replaced = _replace_failed(data, loc, err["type"]) and replaced
            if not replaced:
                break
    return None, problems, failed


def parse_config(raw: Mapping[str, Any] | CollectionConfig) -> CollectionConfig:
    """The model parsed from raw data; raises ConfigError with every type problem."""
    if isinstance(raw, CollectionConfig):
        return raw
    if problems := check_shape(raw):
        raise ConfigError(problems)
    cfg, problems, _ = _parse(raw)
    if problems or cfg is None:
        raise ConfigError(problems or [Problem("(root)", "not a collection config")])
    return cfg


def _under(path: str, failed: set[str]) -> bool:
    """Whether a field path is one of the failed ones or lies inside one."""
    return path in failed or any(
        path[:i] in failed for i, ch in enumerate(path) if ch in ".[" and i
    )


def normalise_and_validate(
    raw: Mapping[str, Any] | CollectionConfig, platforms: Mapping[str, Capabilities]
) -> NormalisedConfig:
    """Normalise (R1) and validate against the platforms' capabilities (R16).

    Raises ConfigError listing every problem; returns the normalised config otherwise.
    """
    failed: set[str] = set()
    type_problems: list[Problem] = []
    if isinstance(raw, CollectionConfig):
        cfg = raw
    else:
        if shape := check_shape(raw):
            raise ConfigError(shape)
        parsed, type_problems, failed = _parse(raw)
        if parsed is None:
            raise ConfigError(type_problems)
        cfg = parsed
    problems: list[Problem] = []
    duplicates: list[Problem] = []

    tenant = normalise_text(cfg.tenant)
    if not TENANT_RE.match(tenant):
        problems.append(
            Problem(
                "tenant",
                f"{shown(cfg.tenant)} is not a tenant id: use 1-63 of "
                "a-z, 0-9, '_' or '-', starting with a letter or digit",
            )
        )
    monitor = normalise_text(cfg.monitor) if cfg.monitor is not None else None
    if monitor is not None and not MONITOR_RE.match(monitor):
        problems.append(
            Problem(
                "monitor",
                f"{shown(cfg.monitor)} is not a monitor id: use 1-48 of A-Z, a-z, 0-9, '_' or '-'",
            )
        )

    def brand(b: BrandIn, path: str) -> Brand:
        name = normalise_text(b.name)
        if not name:
            problems.append(Problem(f"{path}.name", "brand name is empty"))
        for where, value, what in [(f"{path}.name", name, "the name")] + [
            (f"{path}.aliases[{i}]", normalise_text(a), "the alias")
            for i, a in enumerate(b.aliases)
        ]:
            if bad := control_char(value):
                problems.append(Problem(where, f"contains control character {bad}; remove it"))
            elif why := invisible_problem(value, what):
                problems.append(Problem(where, why))
            elif len(value) > MAX_NAME_CHARS:
                problems.append(
                    Problem(
                        where,
                        f"has {len(value)} characters after normalisation; "
                        f"at most {MAX_NAME_CHARS} are allowed",
                    )
                )
        aliases = unique_in_order([normalise_text(a) for a in b.aliases])
        aliases = tuple(a for a in aliases if a != name)
        for i, a in enumerate(b.aliases):
            if not normalise_text(a):
                problems.append(Problem(f"{path}.aliases[{i}]", "alias is empty"))
        domains = unique_in_order([normalise_domain(d) for d in b.domains])
        for i, d in enumerate(domains):
            if "." not in d or " " in d:
                problems.append(
                    Problem(
                        f"{path}.domains[{i}]", f"{shown(d)} is not a domain name like example.com"
                    )
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
                        f"name or alias {shown(n)} is also used by "
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
        if all(is_invisible(ch) or unicodedata.category(ch) in ("Mn", "Me") for ch in text):
            problems.append(
                Problem(f"questions[{i}]", invisible_problem(text, "the question") or "")
            )
            continue
        if len(text) < MIN_QUESTION_CHARS:
            problems.append(
                Problem(
                    f"questions[{i}]",
                    f"question {shown(text)} is too short "
                    f"(at least {MIN_QUESTION_CHARS} characters)",
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
                f"{shown(default_policy)} is not a screenshot policy; "
                f"allowed: {', '.join(SCREENSHOT_POLICIES)}",
            )
        )
    if not (1 <= cfg.repeats <= MAX_REPEATS):
        problems.append(
            Problem("repeats", f"{shown(cfg.repeats)} is out of range; allowed 1..{MAX_REPEATS}")
        )
    if not (0 <= cfg.priority <= 9):
        problems.append(Problem("priority", f"{shown(cfg.priority)} is out of range; allowed 0..9"))
    if cfg.submit_cap < 1:
        problems.append(Problem("submit_cap", f"{shown(cfg.submit_cap)} must be at least 1"))
    if not (1 <= cfg.max_attempts <= MAX_ATTEMPTS_LIMIT):
        problems.append(
            Problem(
                "max_attempts",
                f"{shown(cfg.max_attempts)} is out of range; allowed 1..{MAX_ATTEMPTS_LIMIT}",
            )
        )
    if not (
        MIN_PUBLISH_DEADLINE_SECONDS <= cfg.publish_deadline_seconds <= MAX_PUBLISH_DEADLINE_SECONDS
    ):
        problems.append(
            Problem(
                "publish_deadline_seconds",
                f"{shown(cfg.publish_deadline_seconds)} is out of range; allowed "
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
                    f"unknown platform {shown(ch.platform)}; "
                    f"known: {', '.join(sorted(platforms)) or '(none registered)'}",
                )
            )
            continue
        platform_caps[platform] = caps.submit_cap
        if device not in caps.devices:
            problems.append(
                Problem(
                    f"{path}.device",
                    f"device {shown(ch.device)} is not supported by "
                    f"{platform}; supported: {', '.join(caps.devices)}",
                )
            )
        regions = [normalise_text(r).lower() for r in (ch.regions or [caps.regions[0]])]
        for j, r in enumerate(regions):
            if r not in caps.regions:
                problems.append(
                    Problem(
                        f"{path}.regions[{j}]",
                        f"region {shown(r)} is not supported "
                        f"by {platform}; supported: {', '.join(caps.regions)}",
                    )
                )
        modes = [normalise_text(m).lower() for m in (ch.modes or ["standard"])]
        for j, m in enumerate(modes):
            if m not in caps.modes:
                problems.append(
                    Problem(
                        f"{path}.modes[{j}]",
                        f"mode {shown(m)} is not supported by "
                        f"{platform}; supported: {', '.join(caps.modes)}",
                    )
                )
        policy = ch.screenshot if ch.screenshot is not None else default_policy
        if ch.screenshot is not None and policy not in SCREENSHOT_POLICIES:
            problems.append(
                Problem(
                    f"{path}.screenshot",
                    f"{shown(policy)} is not a screenshot "
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
                    problems.append(
                        Problem(path, f"{shown(f'{platform}/{device}/{r}/{m}')} is listed twice")
                    )
                    continue
                seen_targets.add(target_key)
                shot: ScreenshotPolicy = policy if policy in SCREENSHOT_POLICIES else "off"  # type: ignore[assignment]
                targets.append(ChannelTarget(platform, device, r, m, shot))

    tags, tag_problems = validate_tags(
        cfg.question_tags, {q.text: q.revision for q in questions}, normalise_text
    )
    problems += [Problem(path, message) for path, message in tag_problems]

    # A field that failed its type check holds a stand-in: what the checks say about it is noise.
    problems = type_problems + [p for p in problems if not _under(p.path, failed)]
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
        question_tags=tags,
        duplicates=tuple(duplicates),
    )

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
import hashlib
import json
import re
import types
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from geo_pipeline.domain.platforms import Capabilities, channel_key
from geo_pipeline.domain.question_tags import validate_tags

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
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_NESTING = 10
MAX_VALUES = 100_000  # lists, mappings and scalars, counting what YAML aliases expand to
MAX_YAML_ALIASES = 100
MAX_NUMBER_DIGITS = 30
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
ECHO_CHARS = 40  # how much of a value an error message shows
MAX_LISTED_PROBLEMS = 50
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
        lines = "\n".join(f"  - {p}" for p in problems[:MAX_LISTED_PROBLEMS])
        if len(problems) > MAX_LISTED_PROBLEMS:
            lines += f"\n  ... and {len(problems) - MAX_LISTED_PROBLEMS} more"
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


# --------------------------------------------------------------------------- normalisation
def control_char(text: str) -> str | None:
    """The first control character left in normalised text, as U+XXXX (PostgreSQL cannot store
    U+0000 and no engine should be asked one); None if there is none."""
    for ch in text:
        if unicodedata.category(ch) == "Cc":
            return f"U+{ord(ch):04X}"
    return None


# Characters that draw nothing: format characters (zero-width space and joiners, BOM, bidi
# controls, soft hyphen), separators, controls, private-use code points and lone surrogates, and
# the letters that are blank by design (Hangul fillers, the Braille blank). Not unassigned code
# points: to this Python they include emoji newer than its Unicode tables.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp", "Co", "Cs"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
# Inside a name, the joiners are writing (Persian, Indic scripts, emoji sequences), not padding.
_JOINERS = frozenset("\u200c\u200d")


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) in _INVISIBLE_CATEGORIES or ch in _BLANK_LETTERS


def invisible_problem(text: str, what: str) -> str | None:
    """Why a normalised name cannot be matched in an answer or read by a person: it has no
    visible character (combining marks alone count as none), or is padded with or hides an
    invisible one. None when the text is fine (or empty: that has its own message)."""
    if not text:
        return None
    if all(_invisible(ch) or unicodedata.category(ch) in ("Mn", "Me") for ch in text):
        codes = " ".join(f"U+{ord(ch):04X}" for ch in text[:5])
        return (
            f"{what} has only invisible characters ({codes}{' ...' if len(text) > 5 else ''}); "
            "give one a reader can see"
        )
    for where, ch in (("starts", text[0]), ("ends", text[-1])):
        if _invisible(ch):
            return f"{what} {where} with the invisible character U+{ord(ch):04X}; remove it"
    for ch in text:
        if _invisible(ch) and ch not in _JOINERS and ch != " ":
            return (
                f"{what} contains the invisible character U+{ord(ch):04X}, so it would never "
                "match an answer; remove it"
            )
    return None


def shown(value: Any) -> str:
    """A value as an error message may echo it: a short escaped prefix of a string (repr escapes
    control and invisible characters), a number, or the kind and size of anything larger."""
    if isinstance(value, str):
        head = repr(value[:ECHO_CHARS])
        return head if len(value) <= ECHO_CHARS else f"{head}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if abs(value) < 10**ECHO_CHARS:
            return repr(value)
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} entr{'y' if len(value) == 1 else 'ies'}"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} field{'' if len(value) == 1 else 's'}"
    return f"a value of type {type(value).__name__}"


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


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
class _InputTooLarge(yaml.YAMLError):
    """A bound of the input was crossed while reading it; carries the field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.problem = Problem(path, message)


def _nesting_message() -> str:
    return (
        f"nested {MAX_NESTING} or more levels deep; a collection config needs at most 4 "
        "(like channels[0].regions[0])"
    )


def _too_many_values_message() -> str:
    return (
        f"the config has more than {MAX_VALUES} values (counting what YAML aliases expand to); "
        "a collection config needs far fewer"
    )


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, with the input's bounds enforced while the document is composed,
    before anything is constructed or validated:

    * a key given twice in one mapping is an error: the last value silently winning would run a
      config its author never wrote (a merge key ``<<`` may still be overridden, as YAML means);
    * at most MAX_YAML_ALIASES aliases, none referring to the value it is part of, and at most
      MAX_VALUES values once aliases are expanded: aliases share nodes, so a few lines of
      "billion laughs" are cheap to compose but explode in whatever walks the result;
    * lists and mappings nested less than MAX_NESTING deep (the composer recurses per level);
    * integers of at most MAX_NUMBER_DIGITS digits.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[Any] = []
        self._aliases = 0
        self._values: dict[int, int] = {}  # id(node) -> values once expanded

    def _where(self) -> str:
        return _loc(tuple(self._path))

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if parent is not None:
            if isinstance(index, int):
                self._path.append(index)
            elif isinstance(index, yaml.ScalarNode):
                self._path.append(str(index.value))
            else:
                self._path.append("(key)")
        try:
            return self._compose_bounded(parent, index)
        finally:
            if parent is not None:
                self._path.pop()

    def _compose_bounded(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # type: ignore[no-untyped-call]
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise _InputTooLarge(
                    self._where(),
                    f"more than {MAX_YAML_ALIASES} YAML aliases (*name); write the values out",
                )
            node = super().compose_node(parent, index)
            if id(node) not in self._values:
                raise _InputTooLarge(
                    self._where(),
                    "a YAML alias refers to the value it is part of, which would expand forever",
                )
            return node
        if len(self._path) >= MAX_NESTING and not self.check_event(  # type: ignore[no-untyped-call]
            yaml.ScalarEvent
        ):
            raise _InputTooLarge(self._where(), _nesting_message())
        node = super().compose_node(parent, index)
        values = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                values += self._values[id(child)]
        elif isinstance(node, yaml.MappingNode):
            for key, child in node.value:
                values += self._values[id(key)] + self._values[id(child)]
        if values > MAX_VALUES:
            raise _InputTooLarge(
                self._where(),
                f"YAML aliases (*name) expand this to more than {MAX_VALUES} values; a "
                "collection config needs far fewer: write the values out"
                if self._aliases
                else _too_many_values_message(),
            )
        self._values[id(node)] = values
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {shown(key)} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(str(node.value)) > MAX_NUMBER_DIGITS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"a number of {len(str(node.value))} characters; "
                f"at most {MAX_NUMBER_DIGITS} digits are allowed",
                node.start_mark,
            )
        return super().construct_yaml_int(node)  # type: ignore[no-untyped-call,no-any-return]


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)

# The tokens that decide nesting in JSON text: strings (which may hold brackets) and punctuation.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def _json_nesting_path(text: str) -> str | None:
    """The path of the first list or mapping nested MAX_NESTING deep in JSON text, found without
    parsing it (the parser recurses per level and runs out of stack first); None if none is."""
    frames: list[list[Any]] = []  # per open container: its kind and the child being read
    last = ""
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            last = tok
        elif tok in "[{":
            if len(frames) >= MAX_NESTING:
                return _loc(tuple(f[1] for f in frames))
            frames.append([tok, 0 if tok == "[" else "(key)"])
        elif tok in "]}":
            if frames:
                frames.pop()
        elif tok == ":" and frames and frames[-1][0] == "{":
            try:
                frames[-1][1] = str(json.loads(last))
            except ValueError:
                frames[-1][1] = "(key)"
        elif tok == "," and frames and frames[-1][0] == "[":
            frames[-1][1] += 1
    return None


def load_config_text(
    text: str, fmt: Literal["yaml", "json"] = "yaml", source: str = "(text)"
) -> dict[str, Any]:
    """Parse a config's text (YAML, or JSON) within the input's bounds; the fields are checked
    by :func:`normalise_and_validate`. Raises ConfigError."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(
            [
                Problem(
                    source,
                    f"the config has {len(text)} characters; at most {MAX_CONFIG_BYTES} "
                    "are allowed",
                )
            ]
        )
    try:
        if fmt == "json":
            try:
                data = json.loads(text)
            except RecursionError:
                where = _json_nesting_path(text) or "(root)"
                raise _InputTooLarge(where, _nesting_message()) from None
        else:
            data = yaml.load(text, _StrictLoader)
    except _InputTooLarge as exc:
        raise ConfigError([exc.problem]) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        # ValueError: JSON syntax, and values YAML or JSON cannot represent (a date like
        # 2024-02-30, an integer of thousands of digits).
        raise ConfigError(
            [Problem(source, f"not valid {fmt.upper()}: {_clip(str(exc))}")]
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem("(root)", f"expected a mapping of fields, got {type(data).__name__}")]
        )
    return data


def load_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([Problem(str(p), f"cannot read config file: {exc.strerror}")]) from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            [
                Problem(
                    str(p),
                    f"the file is larger than {MAX_CONFIG_BYTES} bytes; at most that is allowed",
                )
            ]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [Problem(str(p), f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at {exc.start})")]
        ) from exc
    return load_config_text(text, "json" if p.suffix == ".json" else "yaml", str(p))


_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and (_SIMPLE_KEY.match(part) or part == "(key)"):
            out += f".{part}" if out else part
        else:  # a key the user wrote: shown like any value, never whole
            out += f"[{shown(part)}]"
    return out or "(root)"


def _check_shape(raw: Any) -> list[Problem]:
    """Depth and size of plain data (the launchpad gives dicts, not text), walked without
    recursion and stopping at the first bound crossed: pydantic and the messages walk it next."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(raw, ())]
    values = 0
    while stack:
        value, loc = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return [Problem(_loc(loc), _too_many_values_message())]
        if isinstance(value, Mapping | list | tuple):
            if len(loc) >= MAX_NESTING:
                return [Problem(_loc(loc), _nesting_message())]
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            stack.extend((v, (*loc, k)) for k, v in reversed(list(items)))
    return []


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
        return f"\x00{_loc(loc)}"
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
                path = _loc(loc)
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
    if problems := _check_shape(raw):
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
        if shape := _check_shape(raw):
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
        for field_path, value, what in [(f"{path}.name", name, "the name")] + [
            (f"{path}.aliases[{i}]", normalise_text(a), "the alias")
            for i, a in enumerate(b.aliases)
        ]:
            if bad := control_char(value):
                problems.append(Problem(field_path, f"contains control character {bad}; remove it"))
            elif why := invisible_problem(value, what):
                problems.append(Problem(field_path, why))
            elif len(value) > MAX_NAME_CHARS:
                problems.append(
                    Problem(
                        field_path,
                        f"has {len(value)} characters after normalisation; "
                        f"at most {MAX_NAME_CHARS} are allowed",
                    )
                )
        aliases = _unique([normalise_text(a) for a in b.aliases])
        aliases = tuple(a for a in aliases if a != name)
        for i, a in enumerate(b.aliases):
            if not normalise_text(a):
                problems.append(Problem(f"{path}.aliases[{i}]", "alias is empty"))
        domains = _unique([_normalise_domain(d) for d in b.domains])
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
        if all(_invisible(ch) or unicodedata.category(ch) in ("Mn", "Me") for ch in text):
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

"""Reading a config's text within the input's bounds, before anything walks it: the file's size,
YAML aliases (a "billion laughs" expands a few lines into billions of values), nesting depth,
the number of values and of digits. Plain data from the launchpad gets the same bounds
(:func:`check_shape`). The fields themselves are checked by domain/config.py."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from geo_pipeline.domain.config_problems import ConfigError, Problem, clip, field_path, shown

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_NESTING = 10
MAX_VALUES = 100_000  # lists, mappings and scalars, counting what YAML aliases expand to
MAX_YAML_ALIASES = 100
MAX_NUMBER_DIGITS = 30


class _InputTooLarge(yaml.YAMLError):
    """A bound of the input was crossed while reading it; carries the field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.problem = Problem(path, message)


def nesting_message() -> str:
    return (
        f"nested {MAX_NESTING} or more levels deep; a collection config needs at most 4 "
        "(like channels[0].regions[0])"
    )


def too_many_values_message() -> str:
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
        return field_path(tuple(self._path))

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
            raise _InputTooLarge(self._where(), nesting_message())
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
                else too_many_values_message(),
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
                return field_path(tuple(f[1] for f in frames))
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
                raise _InputTooLarge(where, nesting_message()) from None
        else:
            data = yaml.load(text, _StrictLoader)
    except _InputTooLarge as exc:
        raise ConfigError([exc.problem]) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        # ValueError: JSON syntax, and values YAML or JSON cannot represent (a date like
        # 2024-02-30, an integer of thousands of digits).
        raise ConfigError([Problem(source, f"not valid {fmt.upper()}: {clip(str(exc))}")]) from None
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


def check_shape(raw: Any) -> list[Problem]:
    """Depth and size of plain data (the launchpad gives dicts, not text), walked without
    recursion and stopping at the first bound crossed: pydantic and the messages walk it next."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(raw, ())]
    values = 0
    while stack:
        value, loc = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return [Problem(field_path(loc), too_many_values_message())]
        if isinstance(value, Mapping | list | tuple):
            if len(loc) >= MAX_NESTING:
                return [Problem(field_path(loc), nesting_message())]
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            stack.extend((v, (*loc, k)) for k, v in reversed(list(items)))
    return []

"""A collection config's problems: each with its field path, a short escaped prefix of the value
and what is allowed (R1). Shared by the bounded reader (domain/config_loading.py) and the
validation (domain/config.py), so every message echoes values the same way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ECHO_CHARS = 40  # how much of a value an error message shows
MAX_LISTED_PROBLEMS = 50


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


def clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and (_SIMPLE_KEY.match(part) or part == "(key)"):
            out += f".{part}" if out else part
        else:  # a key the user wrote: shown like any value, never whole
            out += f"[{shown(part)}]"
    return out or "(root)"

"""The service profiles' tasks in the simulator's ``--state-file`` journal (simulator.journal).

A restarted simulator must be the same cloro, DataForSEO and Bright Data account: the tasks it
created (and billed) still answer their polls, a reused key still meets its 409, counts per key
still judge "never twice". Each service writes one journal line per change a later answer
depends on -- a task created, tasks dropped by a queue delete, the service's clock advanced, the
service reset -- and a simulator started on the same file replays them in order.

Times: a service's clock is the process's monotonic clock plus its offset; a task is written as
its creation wall time (service wall clock) plus the offsets of its other instants from its
creation, and turned back into the new process's service clock on replay (as the journal does
for the platforms' tasks). Request counters are not kept; per-key submit counts are restored as
one per task created (what a later "submits per key" judgement needs at the least).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

Write = Callable[[dict[str, Any]], None]


def dump(obj: Any, anchor: str, anchor_wall: str, clocks: tuple[str, ...]) -> dict[str, Any]:
    """A task dataclass as a journal record: ``clocks`` (service-clock floats, None allowed)
    as offsets from ``anchor``; datetimes as ISO strings; sets as sorted lists."""
    out: dict[str, Any] = {}
    base = float(getattr(obj, anchor))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == anchor:
            continue
        if f.name in clocks:
            out[f.name] = None if value is None else float(value) - base
        elif isinstance(value, datetime):
            out[f.name] = value.isoformat()
        elif isinstance(value, set):
            out[f.name] = sorted(value)
        else:
            out[f.name] = value
    out["_wall"] = getattr(obj, anchor_wall).isoformat()
    return out


def load(
    cls: type,
    record: dict[str, Any],
    *,
    anchor: str,
    anchor_wall: str,
    clocks: tuple[str, ...],
    now: float,
    wall: datetime,
) -> Any:
    """The task of ``record`` on this process's service clock (``now``/``wall``: the service's
    clock and wall clock at replay, its offset already replayed)."""
    created_wall = datetime.fromisoformat(record["_wall"])
    base = now - (wall - created_wall).total_seconds()
    kwargs: dict[str, Any] = {anchor: base}
    for f in dataclasses.fields(cls):
        if f.name == anchor or f.name not in record:
            continue
        value = record[f.name]
        if f.name in clocks:
            kwargs[f.name] = None if value is None else base + float(value)
        elif f.name == anchor_wall:
            kwargs[f.name] = created_wall
        elif str(f.type).startswith("set["):
            kwargs[f.name] = set(value)
        else:
            kwargs[f.name] = value
    return cls(**kwargs)


__all__ = ["Write", "dump", "load"]

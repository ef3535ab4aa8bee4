"""Reading the completion stream (``<GEO_REDIS_PREFIX>:completions``, written by the workers) for
the completion sensor: where to look, never what is finished (PostgreSQL decides that). A tick
reads bounded ``XRANGE ... COUNT`` pages, reduced on the server to distinct (run, channel) pairs,
and notices when entries it never read are gone so the sensor sweeps PostgreSQL instead."""

from dataclasses import dataclass, field
from typing import Any

import redis as redis_lib

Pair = tuple[str, str]  # (run_id, channel)


# --------------------------------------------------------------------------- stream reading
@dataclass
class StreamRead:
    pairs: set[Pair] = field(default_factory=set)
    last_id: str | None = None
    entries: int = 0
    gap: str | None = None  # why a PostgreSQL sweep is needed (trimmed, lost, reset)


def _id_tuple(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


# One page of XRANGE, reduced on the server to its distinct (run_id, channel) pairs: the sensor
# needs only where to look, and shipping 50k entries of five fields each to Python costs seconds
# of RESP parsing (measured: 11 s vs < 1 s for 50k entries, bench/dagster_sensor.py).
# Returns {last id read, entries read, ["run_id<TAB>channel", ...]}. Ids never contain a tab.
_PAIRS_LUA = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
local seen, out, last = {}, {}, ''
for _, e in ipairs(entries) do
  last = e[1]
  local f, run, ch = e[2], nil, nil
  for j = 1, #f, 2 do
    if f[j] == 'run_id' then run = f[j + 1] elseif f[j] == 'channel' then ch = f[j + 1] end
  end
  if run and ch then
    local k = run .. '\t' .. ch
    if not seen[k] then seen[k] = true; out[#out + 1] = k end
  end
end
return {last, #entries, out}
"""


def read_completions(
    client: redis_lib.Redis, stream: str, after: str | None, page: int, limit: int
) -> StreamRead:
    """Entries after ``after`` (exclusive), at most ``limit``, in pages of ``page``; notices
    when entries we never read are gone (trimmed) or the stream was lost or recreated."""
    out = StreamRead(last_id=after)
    try:
        info: dict[str, Any] = client.xinfo_stream(stream)
    except redis_lib.ResponseError:
        # No such key: never written, or lost with Redis (no persistence, failover).
        out.gap = "stream missing" if after else None
        return out
    if after is not None:
        first = info.get("first-entry")
        last_generated = str(info.get("last-generated-id") or "0-0")
        if _id_tuple(last_generated) < _id_tuple(after):
            out.gap = "stream recreated (ids went back)"
            after = None  # read the new stream from its start
        elif _id_tuple(str(info.get("max-deleted-entry-id") or "0-0")) > _id_tuple(after):
            out.gap = "entries after the cursor were deleted"  # XDEL (Redis >= 7 reports it)
        elif first is None and _id_tuple(last_generated) > _id_tuple(after):
            out.gap = "stream trimmed to nothing"
        elif first is not None and _id_tuple(str(first[0])) > _id_tuple(after):
            # The stream's head moved past our cursor: more entries were added since the last
            # tick than MAXLEN keeps, so some we never read may be gone. (Trimming entries we
            # already read leaves the head at or before the cursor and is no gap.)
            out.gap = "entries after the cursor may have been trimmed"
    start = f"({after}" if after else "-"
    script = client.register_script(_PAIRS_LUA)
    while out.entries < limit:
        count = min(page, limit - out.entries)
        last_id, n, pairs = script(keys=[stream], args=[start, count])
        if not n:
            break
        for pair in pairs:
            run_id, _, channel = str(pair).partition("\t")
            out.pairs.add((run_id, channel))
        out.entries += int(n)
        out.last_id = str(last_id)
        start = f"({out.last_id}"
        if int(n) < count:
            break
    return out

"""The logical names of the Redis streams (R10), defined once: the worker and the relay use them
through ``geo_pipeline.streams.keys``, the named queries that write the outbox receive them as
parameters (``STREAM_PARAMS``). The Redis key adds the namespace prefix (``<ns>:<logical>``).
"""

from __future__ import annotations

COLLECT_PREFIX = "collect:"  # + platform: a platform's text-collection stream
SCREENSHOT_PREFIX = "screenshot:"  # + platform: its screenshot-download stream, apart from text
COMPLETIONS = "completions"  # the workers' finished attempts, read by the Dagster sensor
DEAD = "dead"  # entries that could not be processed

# The parameters of every named query that writes a stream name into geo.outbox.
STREAM_PARAMS: dict[str, str] = {
    "collect_prefix": COLLECT_PREFIX,
    "screenshot_prefix": SCREENSHOT_PREFIX,
    "completions_stream": COMPLETIONS,
}

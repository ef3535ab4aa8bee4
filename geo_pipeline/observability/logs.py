"""Structured JSON logs (D6): one line per event with ids and status; never credentials or
answer text. Lines are written through a buffered handler so a log service is not throttled,
and flushed on size, on warnings and on time (at most ``flush_s`` late), so a quiet process
never sits on its last lines."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from logging.handlers import MemoryHandler
from typing import Any

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# Fields that must never reach a log line (D2): secrets and answer bodies.
_FORBIDDEN = {"api_key", "authorization", "password", "secret", "answer_text", "raw_text", "token"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key in _RESERVED or key.startswith("_"):
                continue
            out[key] = "[redacted]" if key.lower() in _FORBIDDEN else value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out, ensure_ascii=False, default=str)


class TimedMemoryHandler(MemoryHandler):
    """A MemoryHandler that also flushes at most ``flush_s`` after the oldest buffered record:
    on the next record, and from a daemon thread when no record comes (a process that went
    quiet). Batching by size stays what keeps a busy process cheap (D6)."""

    def __init__(
        self, capacity: int, *, flush_s: float, flushLevel: int, target: logging.Handler
    ) -> None:
        super().__init__(capacity, flushLevel=flushLevel, target=target)
        self.flush_s = flush_s
        self._oldest: float | None = None
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="log-flush", daemon=True)
        self._timer.start()

    def emit(self, record: logging.LogRecord) -> None:
        if self._oldest is None:
            self._oldest = time.monotonic()
        super().emit(record)

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        oldest = self._oldest
        late = oldest is not None and time.monotonic() - oldest >= self.flush_s
        return late or super().shouldFlush(record)

    def flush(self) -> None:
        self.acquire()
        try:
            super().flush()
            if self.target is not None:
                try:
                    self.target.flush()
                except (ValueError, OSError):  # its stream was closed under it: nothing to do
                    pass
            self._oldest = None
        finally:
            self.release()

    def _tick(self) -> None:
        period = max(0.01, self.flush_s / 4)
        while not self._stop.wait(period):
            oldest = self._oldest
            if oldest is not None and time.monotonic() - oldest >= self.flush_s:
                self.flush()

    def close(self) -> None:
        self._stop.set()
        super().close()


def configure(
    level: int = logging.INFO,
    stream: Any = None,
    buffer_lines: int = 64,
    flush_s: float = 0.5,
) -> None:
    """JSON lines to ``stream`` (stderr), flushed every ``buffer_lines`` records, on warnings,
    and at most ``flush_s`` seconds after a record was logged."""
    target = logging.StreamHandler(stream or sys.stderr)
    target.setFormatter(JsonFormatter())
    handler = TimedMemoryHandler(
        buffer_lines, flush_s=flush_s, flushLevel=logging.WARNING, target=target
    )
    root = logging.getLogger()
    for old in root.handlers:
        if isinstance(old, TimedMemoryHandler):  # ours from an earlier call: stop its thread
            old.close()
    root.handlers[:] = [handler]
    root.setLevel(level)


def flush() -> None:
    """Write out whatever the root logger's handlers hold (a start-up line, before exiting)."""
    for h in logging.getLogger().handlers:
        h.flush()


def event(logger: logging.Logger, name: str, **fields: Any) -> None:
    """``event(log, "sample.completed", sample_id=..., status=...)``."""
    logger.info(name, extra=fields)

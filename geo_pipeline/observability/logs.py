"""Structured JSON logs (D6): one line per event with ids and status; never credentials or
answer text. Lines are written through a buffered handler so a log service is not throttled."""

from __future__ import annotations

import json
import logging
import sys
import time
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


def configure(level: int = logging.INFO, stream: Any = None, buffer_lines: int = 64) -> None:
    """JSON lines to ``stream`` (stderr), flushed every ``buffer_lines`` records or on warnings."""
    from logging.handlers import MemoryHandler

    target = logging.StreamHandler(stream or sys.stderr)
    target.setFormatter(JsonFormatter())
    handler = MemoryHandler(buffer_lines, flushLevel=logging.WARNING, target=target)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def event(logger: logging.Logger, name: str, **fields: Any) -> None:
    """``event(log, "sample.completed", sample_id=..., status=...)``."""
    logger.info(name, extra=fields)

"""The demo checks every service before its first side effect: with Redis down it stops
before migrating, depositing or creating a run, and says which URL it tried."""

from __future__ import annotations

import socket

import psycopg
import pytest

from geo_pipeline.ops import demo


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_stops_before_any_side_effect_when_redis_is_down(empty_db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", empty_db_url)
    monkeypatch.setenv("GEO_REDIS_URL", f"redis://127.0.0.1:{_dead_port()}/0")
    monkeypatch.delenv("GEO_FORCE_EMBEDDED", raising=False)
    said: list[str] = []
    opts = demo.DemoOptions(state_dir=tmp_path / "state")
    with pytest.raises(demo.DemoError, match=r"Redis is unreachable at redis://127\.0\.0\.1"):
        with demo.services(opts, said.append):
            pytest.fail("the demo went on with Redis down")
    with psycopg.connect(empty_db_url) as conn:
        # Not even migrated: nothing was written before every service answered.
        assert conn.execute("SELECT to_regclass('geo.runs')").fetchone() == (None,)

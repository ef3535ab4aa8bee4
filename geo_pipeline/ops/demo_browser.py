"""The demo's browser channel (issue #32): ``deepseek_web`` on desktop and mobile against the
simulator's DeepSeek chat web app (``/ui/deepseek/``), in headless Debian Chromium.

Present only where Chromium (``GEO_CHROMIUM``, else Debian's ``/usr/bin/chromium``) and the
Playwright package are: otherwise :func:`missing` says why and the demo goes on without it.

The accounts are added the way docs/browser-lane.md says (``accounts add`` then ``accounts
login`` with a person's exported session): the demo adds ``demo-1`` and ``demo-2`` with no
pacing gap (the simulator freezes nobody), logs each in on the simulator's login form as a
person would, imports that session cookie into the account's browser profile under the demo's
state directory and marks the account ready. The cookie goes only into the profile (D2)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

PLATFORM = "deepseek_web"
APP = "deepseek"  # registry options.app of PLATFORM: the simulator web app it drives
# Two accounts, so the desktop and the mobile sample run at once: one account is one browser and
# one conversation at a time, and a sample finding none free waits (docs/browser-lane.md).
ACCOUNTS = ("demo-1", "demo-2")
CONFIG = "browser.yaml"


def missing() -> str | None:
    """Why the browser channel cannot run here, or None when it can."""
    from geo_pipeline.connectors.browser.connector import chromium_path

    path = chromium_path()
    if not (Path(path).exists() or shutil.which(path)):
        return (
            f"no Chromium at {path} (install Debian's package: apt-get install chromium; "
            "or set GEO_CHROMIUM to its path)"
        )
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    return None


def profiles_root(state_dir: Path) -> Path:
    return state_dir / "browser-profiles"


def env(state_dir: Path) -> dict[str, str]:
    """What enables the shipped registry's browser channels: the profiles directory named
    (``GEO_BROWSER_PROFILES``) and the Chromium binary (``GEO_CHROMIUM``)."""
    from geo_pipeline.connectors.browser.connector import chromium_path

    return {"GEO_BROWSER_PROFILES": str(profiles_root(state_dir)), "GEO_CHROMIUM": chromium_path()}


def log_in(database_url: str, simulator_url: str, state_dir: Path) -> None:
    """``accounts add deepseek_web <account>`` + ``accounts login`` for each demo account, against
    the simulator's app."""
    import httpx

    from geo_pipeline.connectors.browser.accounts import profile_dir
    from geo_pipeline.connectors.browser.connector import chromium_path, import_storage_state
    from geo_pipeline.store import db as dbmod
    from geo_pipeline.store.accounts import Pacing, add_account, set_state

    for account in ACCOUNTS:
        with dbmod.connect(database_url) as conn:
            add_account(
                conn, PLATFORM, account, Pacing(daily_budget=50, min_gap_s=0.0, jitter_s=0.0)
            )
            conn.commit()
        # The simulator's login form answers 302 with its session cookie (simulator/webapp).
        resp = httpx.post(f"{simulator_url}/ui/{APP}/login", data={"account": account}, timeout=30)
        if resp.status_code != 302 or "sim_session" not in resp.cookies:
            raise RuntimeError(f"the simulator's {APP} login answered {resp.status_code}")
        cookie: dict[str, Any] = {
            "name": "sim_session",
            "value": resp.cookies["sim_session"],
            "domain": "127.0.0.1",
            "path": f"/ui/{APP}/",
            "expires": time.time() + 86400,
            "httpOnly": True,
            "secure": False,
            "sameSite": "Lax",
        }
        target = profile_dir(profiles_root(state_dir), PLATFORM, account)
        asyncio.run(import_storage_state(chromium_path(), target, [cookie]))
        with dbmod.connect(database_url) as conn:
            set_state(conn, PLATFORM, account, "ready", "demo login imported")
            conn.commit()

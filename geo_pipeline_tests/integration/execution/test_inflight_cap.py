"""A tenant's max_in_flight holds when claims run concurrently (R10): two claim transactions
must not each count the tenant's running samples and both claim up to the room. Claims of
other tenants are not held up by it."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.flows import complete
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run
from geo_pipeline_tests.integration.tenancy.helpers import login_role, with_user

CAP = 3
CHANNELS = [{"platform": "deepseek", "device": "web"}, {"platform": "qwen", "device": "web"}]


def _set_cap(db_url: str, tenant: str, cap: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE geo.tenants SET max_in_flight = %s WHERE tenant_id = %s", (cap, tenant)
        )


def _running(db_url: str, tenant: str) -> int:
    rows = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.samples WHERE tenant_id = %s "
        "AND collection_state = 'running'",
        (tenant,),
    )
    return int(rows[0]["n"])


# Only B's connecting can be slow here (a loaded box); a claim that has connected either
# finishes or is seen waiting on a lock within milliseconds. A hang guard, not a speed.
B_CAP_S = 120.0


def _blocked_or_done(db_url: str, thread: threading.Thread, got: dict[str, Any]) -> bool:
    """Whether B's claim (its thread, its backend pid in ``got["pid"]``) is seen blocked by
    another session's lock (True) before it finished (False): what B did while A's transaction was open, read
    from pg_stat_activity instead of guessed from a fixed join timeout (1 s and 5 s were
    speeds: on a loaded box B may not even have connected by then)."""
    started = time.monotonic()
    seen: list[Any] = []
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as watcher:
        while thread.is_alive():
            if "pid" in got:
                seen = watcher.execute(
                    "SELECT state, wait_event_type, wait_event, pg_blocking_pids(pid) AS by, "
                    "query FROM pg_stat_activity WHERE pid = %s",
                    (got["pid"],),
                ).fetchall()
                if seen and seen[0]["by"]:  # waiting on a lock another session holds
                    return True
            assert time.monotonic() - started < B_CAP_S, f"B neither waited nor ended: {seen}"
            time.sleep(0.01)
    return False


def _claim(
    conn: Any, owner: str, want: int = 10, platforms: tuple[str, ...] = ("deepseek",)
) -> list[dict[str, Any]]:
    return ex.claim_fair(conn, owner=owner, platforms=platforms, want=want, lease_s=30)


def test_two_overlapping_claims_never_exceed_the_cap(db_url):
    """Worker A's claim is not committed yet when worker B claims: B must wait for A and then
    see A's samples running, instead of claiming up to the cap again. A and B are the lanes of
    two platforms (in one worker or two): they share the tenant's cap, not its samples."""
    make_run(db_url, "r-cap", questions=12, channels=CHANNELS)
    _set_cap(db_url, "acme", CAP)
    a = psycopg.connect(db_url, row_factory=dict_row)
    try:
        a.execute("SELECT 1")  # an open transaction: claim_fair's block becomes a savepoint
        first = _claim(a, "worker:a:1", platforms=("deepseek",))
        assert len(first) == CAP
        got: dict[str, Any] = {}

        def worker_b() -> None:
            with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as b:
                got["pid"] = b.info.backend_pid
                got["rows"] = _claim(b, "worker:b:1", platforms=("qwen",))

        t = threading.Thread(target=worker_b)
        t.start()
        # B either waits for A (the cap holds) or has claimed already (overshoot).
        _blocked_or_done(db_url, t, got)
        a.commit()
        t.join(B_CAP_S)
        assert not t.is_alive()
    finally:
        a.close()
    assert _running(db_url, "acme") <= CAP, f"{_running(db_url, 'acme')} running, cap {CAP}"
    assert got["rows"] == []


@pytest.mark.parametrize("role", ["superuser", "geo_service"])
def test_concurrent_claim_storm_keeps_the_cap(db_url, role):
    """Four claimers in a loop, each finishing what it holds now and then: the running count,
    read from the transition log at every claim, never passes the cap. Also as a geo_service
    login, what production connects as: the claim's tenant lock needs its privileges."""
    make_run(db_url, "r-cap-storm", questions=30, channels=CHANNELS)
    _set_cap(db_url, "acme", CAP)
    with contextlib.ExitStack() as stack:
        url = db_url
        if role != "superuser":
            url = with_user(db_url, stack.enter_context(login_role(db_url, "geo_svc", role)))
        _claim_storm(url, db_url)


def _claim_storm(url: str, db_url: str) -> None:
    stop = time.monotonic() + 3.0
    errors: list[BaseException] = []
    peak = [0]
    lock = threading.Lock()

    def claimer(n: int) -> None:
        owner = f"worker:s:{n}"
        try:
            with psycopg.connect(url, row_factory=dict_row, autocommit=True) as c:
                cc: Any = c
                while time.monotonic() < stop:
                    rows = _claim(cc, owner, want=CAP, platforms=(("deepseek",), ("qwen",))[n % 2])
                    running = _running(db_url, "acme")
                    with lock:
                        peak[0] = max(peak[0], running)
                    if rows:
                        complete.finish_batch(
                            cc,
                            owner=owner,
                            items=[
                                complete.Finish(r["sample_id"], r["fencing_token"], "queued",
                                          sub_to="planned", reason="test", outcome="not_accepted",
                                          req_state="not_accepted")
                                for r in rows
                            ],
                        )  # fmt: skip
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert peak[0] <= CAP, f"peak {peak[0]} running against a cap of {CAP}"


def test_claims_of_another_tenant_are_not_held_up(db_url):
    """Only the tenants being claimed for are locked: globex's claim does not wait for acme's."""
    make_run(db_url, "r-cap-a", questions=6, tenant="acme")
    make_run(db_url, "r-cap-b", questions=6, tenant="globex")
    _set_cap(db_url, "acme", CAP)
    a = psycopg.connect(db_url, row_factory=dict_row)
    try:
        a.execute("SELECT 1")  # A's transaction stays open until a.commit()
        # A claims acme's samples by id: the cap holds there too (6 asked, 3 claimed), and
        # A's open transaction holds acme's row alone.
        ids_a = [
            r["sample_id"]
            for r in fetch(
                db_url, "SELECT sample_id FROM geo.samples WHERE tenant_id = 'acme' ORDER BY 1"
            )
        ]
        assert len(ex.claim_ids(a, ids_a, owner="worker:a:1", lease_s=30)) == CAP  # type: ignore[arg-type]
        ids_b = [
            r["sample_id"]
            for r in fetch(
                db_url, "SELECT sample_id FROM geo.samples WHERE tenant_id = 'globex' ORDER BY 1"
            )
        ]
        got: dict[str, Any] = {}

        def worker_b() -> None:
            with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as b:
                got["pid"] = b.info.backend_pid
                got["rows"] = ex.claim_ids(b, ids_b, owner="worker:b:1", lease_s=30)  # type: ignore[arg-type]

        t = threading.Thread(target=worker_b)
        t.start()
        blocked = _blocked_or_done(db_url, t, got)
        a.commit()
        t.join(B_CAP_S)
        assert not blocked, "a claim of another tenant waited for acme's claim"
    finally:
        a.close()
    assert len(got["rows"]) == 6

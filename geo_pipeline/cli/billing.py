"""``geo-pipeline billing``: balances, deposits, run confirmation and close, a run's ledger, and
reconciliation against the platforms' fee statements (R23, R24). Amounts are integer minor units
(fen for CNY) on input and output; every command takes ``--json``."""

from __future__ import annotations

import uuid

import click

from geo_pipeline.cli.output import emit_json, emit_table


@click.group("billing")
def billing_group() -> None:
    """Money: balances, reservations, charges, reconciliation (integer minor units)."""


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@billing_group.command("balance")
@click.option("--tenant", required=True)
@click.option("--json", "as_json", is_flag=True)
def balance_cmd(tenant: str, as_json: bool) -> None:
    """Available, reserved and spent money of TENANT, summed from its ledger entries."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            b = ledger.balances(conn, tenant)
        except ledger.BillingError as exc:
            raise _fail(exc) from None
    if as_json:
        emit_json(b.as_dict())
        return
    emit_table(
        [
            {"balance": name, "minor units": m.amount_minor, "amount": m.format()}
            for name, m in (
                ("available", b.available),
                ("reserved", b.reserved),
                ("spent", b.spent),
            )
        ],
        ["balance", "minor units", "amount"],
        title=f"tenant {tenant} ({b.currency})",
    )


@billing_group.command("deposit")
@click.option("--tenant", required=True)
@click.option("--amount", required=True, type=int, help="Integer minor units (fen for CNY).")
@click.option("--currency", default="CNY", show_default=True)
@click.option(
    "--idempotency-key",
    default=None,
    help="Repeat a deposit safely: the same key never books twice (default: a new key).",
)
@click.option("--json", "as_json", is_flag=True)
def deposit_cmd(
    tenant: str, amount: int, currency: str, idempotency_key: str | None, as_json: bool
) -> None:
    """Add AMOUNT minor units to TENANT's account."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.domain.money import Money, MoneyError
    from geo_pipeline.store import db as dbmod

    key = idempotency_key or f"deposit:{tenant}:{uuid.uuid4().hex}"
    with dbmod.connect() as conn:
        try:
            entry = ledger.deposit(conn, tenant, amount, currency.upper(), key)
        except (ledger.BillingError, MoneyError) as exc:
            raise _fail(exc) from None
        # The deposit is committed: whatever happens next, say so (a retry must reuse the key).
        try:
            b = ledger.balances(conn, tenant)
        except Exception as exc:
            raise click.ClickException(
                f"deposit booked (entry {entry}, key {key}), but the balance could not be read: "
                f"{exc}"
            ) from None
    if as_json:
        emit_json({"entry_id": entry, "idempotency_key": key, "balances": b.as_dict()})
    else:
        click.echo(
            f"deposited {Money(amount, currency.upper()).format()} (entry {entry}, key {key}); "
            f"available {b.available.format()}"
        )


@billing_group.command("confirm")
@click.argument("run_id")
@click.option("--no-dispatch", is_flag=True, help="Reserve only; do not queue the run's work.")
@click.option("--json", "as_json", is_flag=True)
def confirm_cmd(run_id: str, no_dispatch: bool, as_json: bool) -> None:
    """Reserve the run's estimated maximum (refused when the balance is short), then queue its
    work through the same plan checks as `runs create` and the launchpad (a failing check keeps
    the run reserved and undispatched; confirming again re-runs them)."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.flows.create_run import PlanChecksFailed, dispatch_checked
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            reserved = ledger.confirm_run(conn, run_id)
        except ledger.BillingError as exc:
            raise _fail(exc) from None
        conn.commit()  # the reservation stands whatever the checks say
        try:
            queued = 0 if no_dispatch else dispatch_checked(conn, run_id)
        except PlanChecksFailed as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(
            {
                "run_id": run_id,
                "reserved_minor": reserved.amount_minor,
                "currency": reserved.currency,
                "queued": queued,
            }
        )
    else:
        click.echo(f"run {run_id}: reserved {reserved.format()}; queued {queued} samples")


@billing_group.command("close")
@click.argument("run_id")
@click.option("--force", is_flag=True, help="Close although samples may still cost money.")
@click.option("--json", "as_json", is_flag=True)
def close_cmd(run_id: str, force: bool, as_json: bool) -> None:
    """Release the unused reservation of RUN_ID. Refunds nothing (R24)."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            result = ledger.close_run(conn, run_id, force=force)
        except ledger.BillingError as exc:
            raise _fail(exc) from None
    if as_json:
        emit_json(
            {
                "run_id": run_id,
                "released_minor": result.released.amount_minor,
                "currency": result.released.currency,
                "closed_now": result.closed_now,
            }
        )
    else:
        state = "closed" if result.closed_now else "was already closed"
        click.echo(f"run {run_id} {state}; released {result.released.format()}")


@billing_group.command("ledger")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
def ledger_cmd(run_id: str, as_json: bool) -> None:
    """Every ledger entry of RUN_ID and its totals."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.domain.money import Money
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            data = ledger.run_ledger(conn, run_id)
        except ledger.BillingError as exc:
            raise _fail(exc) from None
    if as_json:
        emit_json(data)
        return
    rows = [
        {**e, "amount": Money(int(e["amount_minor"]), str(e["currency"]).strip()).format()}
        for e in data["entries"]
    ]
    emit_table(
        rows,
        [
            "entry_id",
            "kind",
            "amount_minor",
            "amount",
            "sample_id",
            "attempt_no",
            "upstream_id",
            "idempotency_key",
        ],
        title=f"ledger of run {run_id} (minor units, and in {data['currency']})",
    )
    if data["totals"]:
        # Each total in minor units beside its amount in major units (R23: integers stored).
        emit_table(
            [
                {
                    "total": k.removesuffix("_minor"),
                    "minor units": v,
                    "amount": Money(int(v), data["currency"]).format(),
                }
                for k, v in data["totals"].items()
                if k.endswith("_minor") and isinstance(v, int)
            ],
            ["total", "minor units", "amount"],
            title="totals",
        )


@billing_group.command("refund")
@click.argument("run_id")
@click.option("--upstream-id", required=True, help="The upstream task the refund is for.")
@click.option("--amount", required=True, type=int, help="Integer minor units.")
@click.option("--reason", required=True, help="Why, e.g. the reconciliation line it settles.")
@click.option("--idempotency-key", required=True, help="Repeat safely: one key, one refund.")
@click.option("--json", "as_json", is_flag=True)
def refund_cmd(
    run_id: str, upstream_id: str, amount: int, reason: str, idempotency_key: str, as_json: bool
) -> None:
    """Refund part of what RUN_ID was charged for one upstream task (never more than charged;
    never automatic, R24)."""
    from geo_pipeline.billing import ledger
    from geo_pipeline.domain.money import MoneyError
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            entry = ledger.refund(conn, run_id, upstream_id, amount, reason, idempotency_key)
        except (ledger.BillingError, MoneyError) as exc:
            raise _fail(exc) from None
    if as_json:
        emit_json(
            {
                "entry_id": entry,
                "run_id": run_id,
                "upstream_id": upstream_id,
                "amount_minor": amount,
            }
        )
    else:
        click.echo(f"refunded {amount} minor units for {upstream_id} (entry {entry})")


@billing_group.command("review")
@click.option("--run-id", default=None, help="Only this run.")
@click.option("--json", "as_json", is_flag=True)
def review_cmd(run_id: str | None, as_json: bool) -> None:
    """Charges that exceeded their run's reservation (covered by flagged adjustments), runs whose
    maintained account disagrees with its entries, and statement lines of tasks we never sent."""
    from geo_pipeline.billing import ledger, reconcile
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        flagged = ledger.entries_for_review(conn, run_id)
        drift = ledger.account_drift(conn, run_id)
        stray = reconcile.unattributed_statement_lines(conn)
    if as_json:
        emit_json(
            {"over_reservation": flagged, "account_drift": drift, "unattributed_lines": stray}
        )
        return
    emit_table(
        flagged,
        ["entry_id", "run_id", "sample_id", "attempt_no", "upstream_id", "amount_minor"],
        title="charges beyond the reservation (adjusted, to review)",
    )
    if stray:
        emit_table(stray, title="statement lines for tasks no run of ours knows")
    click.echo("run accounts agree with the entries" if not drift else f"DRIFT: {drift}")


@billing_group.command("reconcile")
@click.argument("run_id")
@click.option(
    "--statements-from-simulator",
    is_flag=True,
    help="First fetch, through each platform's connector (the simulator's statement API for "
    "simulated platforms), the statements of the days the run's fees fall on.",
)
@click.option("--json", "as_json", is_flag=True)
def reconcile_cmd(run_id: str, statements_from_simulator: bool, as_json: bool) -> None:
    """Match RUN_ID's charges to the platforms' fee statements and classify every difference."""
    from geo_pipeline.billing import ledger, reconcile
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.money import Money, MoneyError
    from geo_pipeline.domain.words import exact_minor_text, reconciliation_text
    from geo_pipeline.flows.settle import settle_run
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        try:
            # Closing stays its own command (`billing close`, with --force): reconcile only.
            settled = settle_run(
                conn,
                run_id,
                registry=load_registry() if statements_from_simulator else None,
                close=False,
            )
            lines = reconcile.reconciliation_lines(conn, run_id)
            # Per platform: a cost API's statements, or request-level usage x price version.
            sources = reconcile.statement_sources(conn, run_id)
        except (LookupError, ledger.BillingError, MoneyError, ValueError) as exc:
            raise _fail(exc) from None
    summary = settled.summary
    imports = [i.as_dict() for i in settled.imported]
    if as_json:
        emit_json(
            {
                "imports": imports,
                "unavailable": list(settled.unavailable),
                "sources": sources,
                "summary": summary.as_dict(),
                "lines": lines,
            }
        )
        return
    for platform, source in sources.items():
        click.echo(f"{platform}: {source}")
    for missing in settled.unavailable:
        if "(statement_source usage_fields)" in missing:
            continue  # said above, per platform: reconciled from usage, nothing pending
        click.echo(f"statement not available (its lines stay pending): {missing}")
    for imp in imports:
        click.echo(
            f"statement {imp['platform']} {imp['statement_date']}: {imp['lines']} lines"
            + ("" if imp["imported_now"] else " (already imported)")
        )
    cur = (summary.currency or "CNY").strip()

    def money(minor: int) -> str:
        return f"{minor} minor units {cur} ({Money(minor, cur).format()})"

    if lines and all(line["classification"] == "pending" for line in lines):
        # Nothing to compare against yet: a table of "pending" lines and a difference of 0
        # would read as "checked, all fine".
        click.echo(
            f"run {run_id}: no fee statement covers its {len(lines)} upstream tasks yet "
            f"(ours {money(summary.ours_total_minor)}, all pending). Fetch the statements "
            f"with `geo-pipeline billing reconcile {run_id} --statements-from-simulator` "
            f"(or `geo-pipeline runs settle {run_id}`, which also closes the run)."
        )
        return
    differing = [line for line in lines if line["classification"] != "matched"]
    for row in differing:
        # the vendor's exact amount where it bills fractions of a minor unit: a line's 0 beside
        # a summary's rounded total of several such lines needs it (issue #34, fourth read)
        exact = (row.get("detail") or {}).get("cost_exact_minor", row["theirs_minor"])
        row["theirs_exact_minor"] = exact_minor_text(exact)
    if not differing:
        click.echo(f"run {run_id}: {len(lines)} upstream tasks, no differences")
    else:
        emit_table(
            differing,
            [
                "upstream_id",
                "platform",
                "classification",
                "fee_class",
                "ours_minor",
                "theirs_minor",
                "theirs_exact_minor",
                "difference_minor",
            ],
            title=f"differences of run {run_id}, per line (minor units {summary.currency})",
        )
    s = summary.as_dict()
    emit_table(
        [
            {
                "classification": k,
                "lines": v,
                "difference_minor": s["difference_by_classification"][k],
            }
            for k, v in s["counts"].items()
        ],
        title="by classification",
    )
    emit_table(
        [
            {"fee_class": k, "ours_minor": v, "theirs_minor": s["theirs_by_fee_class"][k]}
            for k, v in s["ours_by_fee_class"].items()
        ],
        title="fees: completed / failed / to verify",
    )
    if summary.pending_ours_minor:
        click.echo(f"pending (statement not in yet): {money(summary.pending_ours_minor)}")
    for line in reconciliation_text(
        summary.unexplained_difference_minor,
        summary.explained_difference_minor,
        0,
        summary.currency,
        absolute_minor=summary.unexplained_absolute_minor,
        unexplained_lines=summary.unexplained_lines,
        no_vendor_bill_minor=summary.no_vendor_bill_ours_minor,
        explained_exact_minor=summary.explained_difference_exact_minor,
    ):
        click.echo(line)
    if not summary.clean:
        click.echo("needs review: the unexplained lines are listed above")


def register(root: click.Group) -> None:
    root.add_command(billing_group)

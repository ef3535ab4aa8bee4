"""``geo-pipeline review``: the samples waiting for a person, and recording a decision.

``review list`` shows every sample whose analysis is in review, whose answer was kept raw after
a parse failure (R13) or whose validity verdict is doubtful, with the reason and a pointer to
its evidence. ``review resolve`` records the decision (geo.review_decisions) and the guarded
state transition, logged with the operator as actor; the analyst tables pick it up at once.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import POSITIVE, emit_json, emit_table
from geo_pipeline.domain.vocabulary import REVIEW_VERDICTS

if TYPE_CHECKING:
    from geo_pipeline.store import db as dbmod

RAW_PREVIEW_CHARS = 160
LIST_COLUMNS = (
    "sample_id",
    "run_id",
    "channel",
    "subject",
    "reason",
    "analysis_state",
    "validity",
    "evidence",
)


def _default_actor() -> str:
    from geo_pipeline.settings import settings

    try:
        return settings().actor or getpass.getuser()
    except (KeyError, OSError):
        return ""


@click.group("review")
def review_group() -> None:
    """The review queue: samples waiting for a person's decision."""


@review_group.command("list")
@click.option("--run", "run_id", default=None, help="Only this run.")
@click.option(
    "--limit", default=1000, type=POSITIVE, show_default=True, help="At most this many rows."
)
@click.option(
    "--raw",
    "show_raw",
    is_flag=True,
    help="Show the start of each kept raw response (from the archive, digest-checked, "
    "control characters removed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(run_id: str | None, limit: int, show_raw: bool, as_json: bool) -> None:
    """List the samples waiting for review, oldest first."""
    from geo_pipeline.analysis import review as reviewmod
    from geo_pipeline.store import db as dbmod

    with dbmod.connect() as conn:
        rows = reviewmod.list_review_queue(conn, run_id, limit)
        if show_raw:
            _add_raw_previews(conn, rows)
    for r in rows:
        # Where the raw answer is: the archived object, else the answer row in the database.
        rev = r["answer_revision"]
        r["evidence"] = r["evidence_key"] or (f"geo.answers revision {rev}" if rev else None)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("nothing to review" + (f" in run {run_id}" if run_id else ""))
        return
    columns = (*LIST_COLUMNS, "raw_preview") if show_raw else LIST_COLUMNS
    emit_table(rows, columns, title=f"{len(rows)} waiting for review")
    click.echo("resolve with: geo-pipeline review resolve SAMPLE_ID --verdict ... --note ...")


def _add_raw_previews(conn: dbmod.Conn, rows: list[dict[str, Any]]) -> None:
    """The first bytes of each sample's kept raw response, as text safe for a terminal."""
    from geo_pipeline.evidence.access import fetch_evidence_for
    from geo_pipeline.evidence.archive import ArchiveError
    from geo_pipeline.evidence.backend import archive_from_url

    archive = archive_from_url()
    from geo_pipeline.store.queries import Q

    tenant_of = Q("evidence.sample_tenant")
    tenants = {
        r["sample_id"]: conn.execute(tenant_of, {"sample_id": r["sample_id"]}).fetchone()
        for r in rows
    }
    for r in rows:
        owner = tenants[r["sample_id"]]
        try:
            if owner is None:
                raise LookupError("sample not found")
            raw = fetch_evidence_for(
                conn, archive, owner["tenant_id"], r["sample_id"], "response_raw"
            )
        except (LookupError, PermissionError, ArchiveError) as exc:
            r["raw_preview"] = f"({type(exc).__name__}: {exc})"[:RAW_PREVIEW_CHARS]
            continue
        text = raw[: RAW_PREVIEW_CHARS * 4].decode("utf-8", errors="replace")
        r["raw_preview"] = "".join(c if c.isprintable() else " " for c in text)[:RAW_PREVIEW_CHARS]


@review_group.command("resolve")
@click.argument("sample_id")
@click.option(
    "--verdict",
    type=click.Choice(REVIEW_VERDICTS),
    required=True,
    help="accepted/failed: decide an analysis in review; valid/invalid: judge the answer.",
)
@click.option("--note", required=True, help="Why: kept with the decision for the next reader.")
@click.option("--actor", default=None, help="Who decides (default: $GEO_ACTOR or the login).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def resolve_cmd(sample_id: str, verdict: str, note: str, actor: str | None, as_json: bool) -> None:
    """Record a decision on SAMPLE_ID as a guarded transition in the log."""
    from geo_pipeline.analysis import review as reviewmod
    from geo_pipeline.store import db as dbmod

    who = actor if actor is not None else _default_actor()
    with dbmod.connect() as conn:
        try:
            result = reviewmod.resolve(conn, sample_id, verdict, note, who)
        except reviewmod.ReviewError as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(result)
        return
    click.echo(
        f"recorded decision {result['decision_id']} on sample {sample_id} ({result['subject']}: "
        f"{verdict}) by {result['actor']}; analysis is now {result['analysis_state']}"
    )


def register(root: click.Group) -> None:
    """Add ``review`` to the root group."""
    root.add_command(review_group)

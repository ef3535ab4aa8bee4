"""``geo-pipeline evidence …``: read archived evidence, only through the tenant check (R20).

    geo-pipeline evidence get SAMPLE_ID --tenant T [--kind answer_raw] [--revision N]
                                        [--out FILE | --presign [--expires S]] [--json]
    geo-pipeline evidence list SAMPLE_ID --tenant T [--json]
    geo-pipeline evidence reparse (SAMPLE_ID ... | --run RUN_ID) [--no-analyse] [--json]
    geo-pipeline evidence export RUN_ID --tenant T --format wacz --out FILE [--json]
    geo-pipeline evidence verify RUN_ID [--json]

The archive comes from ``GEO_EVIDENCE_URL`` (``s3://bucket/prefix`` or ``file:///path``), the
database from ``GEO_DATABASE_URL``. Bytes are verified against the recorded sha256 before they
are written anywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from geo_pipeline.cli.output import emit_json, emit_table
from geo_pipeline.domain.vocabulary import EVIDENCE_KINDS

if TYPE_CHECKING:
    from geo_pipeline.evidence.archive import Archive

_TEXT_KINDS = ("answer_raw", "answer_html", "citations")


def _archive() -> Archive:
    from geo_pipeline.evidence.backend import archive_from_url

    try:
        return archive_from_url()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def register(root: click.Group) -> None:
    root.add_command(evidence)


@click.group()
def evidence() -> None:
    """Archived evidence of samples: answers, citations, screenshots (tenant-checked)."""


@evidence.command("get")
@click.argument("sample_id")
@click.option("--tenant", "tenant_id", required=True, help="The tenant asking; must own it.")
@click.option("--kind", type=click.Choice(EVIDENCE_KINDS), default="answer_raw", show_default=True)
@click.option(
    "--revision",
    type=click.IntRange(1, 2**31 - 1),
    default=None,
    help="Revision of that kind (newest).",
)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the object to this file.")  # fmt: skip
@click.option("--presign", is_flag=True, help="Print a short-lived download URL instead.")
@click.option("--expires", type=click.IntRange(1, 3600), default=300, show_default=True,
              help="Lifetime of a presigned URL in seconds.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def get(
    sample_id: str,
    tenant_id: str,
    kind: str,
    revision: int | None,
    out: Path | None,
    presign: bool,
    expires: int,
    as_json: bool,
) -> None:
    """Fetch one evidence object of SAMPLE_ID for --tenant (to stdout, --out FILE or a URL)."""
    from geo_pipeline.evidence.access import (
        EvidenceAccessDenied,
        EvidenceNotFound,
        find_object,
        read_object,
    )
    from geo_pipeline.evidence.archive import ArchiveError, PresignUnsupported
    from geo_pipeline.evidence.bundle import is_bundle_key
    from geo_pipeline.evidence.warc import is_record_key
    from geo_pipeline.store.db import connect

    if out is not None and presign:
        raise click.UsageError("choose either --out or --presign")
    archive = _archive()
    with connect() as conn:
        try:
            obj = find_object(conn, tenant_id, sample_id, kind, revision)
            meta: dict[str, Any] = {
                k: v for k, v in obj.as_dict().items() if k not in ("object_id", "storage_key")
            }
            if presign and is_record_key(obj.storage_key):
                # One record of a WARC batch object: a URL that serves its byte range only
                # (the Range header is signed; issue 33).
                from geo_pipeline.evidence.presign_range import presign_record

                ranged = presign_record(conn, archive, tenant_id, sample_id, kind, revision,
                                        expires_s=expires)  # fmt: skip
                meta.update(url=ranged.url, headers=ranged.headers, expires_s=ranged.expires_s)
                if as_json:
                    emit_json(meta)
                else:
                    click.echo(ranged.url)
                    click.echo(f"Range: {ranged.headers['Range']}  (send exactly this header)")
                return
            if presign:
                if is_bundle_key(obj.storage_key) or is_record_key(obj.storage_key):
                    raise PresignUnsupported(
                        f"the {kind} is a part of the answer's evidence bundle or WARC batch "
                        "object; no URL is made for a part (it would serve every part): use "
                        "--out FILE"
                    )
                meta["url"] = archive.presign(obj.storage_key, expires_s=expires)
                meta["expires_s"] = expires
                emit_json(meta) if as_json else click.echo(meta["url"])
                return
            data = read_object(archive, obj.storage_key, obj.kind, obj.sha256, obj.block_sha256)
        except (EvidenceAccessDenied, EvidenceNotFound, ArchiveError) as exc:
            raise click.ClickException(str(exc)) from None
    if out is not None:
        out.write_bytes(data)
        meta["out"] = str(out)
        if as_json:
            emit_json(meta)
        else:
            click.echo(f"wrote {obj.kind} r{obj.revision} ({obj.size_bytes} bytes, "
                       f"sha256 {obj.sha256[:12]}…) to {out}")  # fmt: skip
        return
    if as_json:
        if kind not in _TEXT_KINDS:
            raise click.ClickException(f"{kind} is binary: use --out FILE or --presign with --json")
        meta["content"] = data.decode("utf-8", errors="replace")
        emit_json(meta)
        return
    if kind not in _TEXT_KINDS and sys.stdout.isatty():
        raise click.ClickException(f"{kind} is binary: use --out FILE (or redirect stdout)")
    # The bytes go to the binary layer under stdout (click 8.5 deprecates get_binary_stream);
    # the text layer is flushed first so nothing printed before lands after them.
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@evidence.command("list")
@click.argument("sample_id")
@click.option("--tenant", "tenant_id", required=True, help="The tenant asking; must own it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(sample_id: str, tenant_id: str, as_json: bool) -> None:
    """List every archived object (kind, revision, digest, size, type) of SAMPLE_ID."""
    from geo_pipeline.evidence.access import EvidenceAccessDenied, list_objects
    from geo_pipeline.store.db import connect

    with connect() as conn:
        try:
            objects = list_objects(conn, tenant_id, sample_id)
        except EvidenceAccessDenied as exc:
            raise click.ClickException(str(exc)) from None
    rows = [
        {k: v for k, v in o.as_dict().items() if k not in ("object_id", "storage_key")}
        for o in objects
    ]
    if as_json:
        emit_json(rows)
        return
    emit_table(
        rows,
        ["kind", "revision", "sha256", "size_bytes", "mime_type", "attempt_no", "captured_at"],
        title=f"evidence of {sample_id}",
    )


@evidence.command("reparse")
@click.argument("sample_ids", nargs=-1)
@click.option("--run", "run_id", default=None, help="Every unparseable sample of this run.")
@click.option("--no-analyse", is_flag=True, help="Do not re-run the run's analysis afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def reparse_cmd(sample_ids: tuple[str, ...], run_id: str | None, no_analyse: bool,
                as_json: bool) -> None:  # fmt: skip
    """Parse the kept raw responses again (after a parser fix) into new answer revisions, then
    judge validity and analyse again. Reads archived bytes only: the platform is never asked
    and nothing is charged (R13). Exit code 1 when any sample still does not parse."""
    from geo_pipeline.flows.reparse import reparse
    from geo_pipeline.store.db import connect

    if not sample_ids and not run_id:
        raise click.UsageError("name SAMPLE_IDs or --run RUN_ID")
    archive = _archive()
    with connect() as conn:
        results = reparse(
            conn, archive, sample_ids=sample_ids, run_id=run_id, analyse=not no_analyse
        )
    rows = [r.__dict__ for r in results]
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("nothing to re-parse (no completed sample with a kept raw response matched)")
    else:
        emit_table(
            rows,
            ["sample_id", "outcome", "answer_revision", "evidence_state", "validity", "detail"],
            title=f"re-parsed {sum(r.outcome == 'reparsed' for r in results)} of {len(rows)}",
        )
    if any(r.outcome != "reparsed" for r in results):
        sys.exit(1)


@evidence.command("export")
@click.argument("run_id")
@click.option("--tenant", "tenant_id", required=True, help="The tenant asking; must own the run.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["wacz"]),
    default="wacz",
    show_default=True,
    help="wacz: a web archive collection ReplayWeb.page / pywb / warcio open.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file to write (e.g. RUN.wacz).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def export_cmd(run_id: str, tenant_id: str, fmt: str, out: Path, as_json: bool) -> None:
    """Export every evidence record of RUN_ID, verified, as a WACZ (WARC + CDXJ index + pages +
    datapackage digests)."""
    from geo_pipeline.evidence.access import EvidenceAccessDenied
    from geo_pipeline.evidence.archive import ArchiveError
    from geo_pipeline.evidence.wacz import export_wacz
    from geo_pipeline.store.db import connect

    del fmt  # one format so far
    archive = _archive()
    tmp = out.with_name(out.name + ".part")
    with connect() as conn:
        try:
            with tmp.open("wb") as fh:
                summary = export_wacz(conn, archive, tenant_id, run_id, fh)
        except (EvidenceAccessDenied, ArchiveError) as exc:
            tmp.unlink(missing_ok=True)
            raise click.ClickException(str(exc)) from None
    tmp.replace(out)  # a half-written export never sits under the name asked for
    result = {"run_id": run_id, "out": str(out), "records": summary.records,
              "pages": summary.pages, "warc_bytes": summary.warc_bytes}  # fmt: skip
    if as_json:
        emit_json(result)
    else:
        click.echo(f"wrote {summary.records} records ({summary.pages} pages) of run {run_id} "
                   f"to {out}")  # fmt: skip


@evidence.command("verify")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify_cmd(run_id: str, as_json: bool) -> None:
    """Read every evidence object of RUN_ID whole and list the torn ones (missing, not the bytes
    their key names, or holding a record whose digest does not match the index). Exit code 1
    when any is torn."""
    from geo_pipeline.evidence.wacz import verify_run
    from geo_pipeline.store.db import connect

    archive = _archive()
    with connect() as conn:
        checked, torn = verify_run(conn, archive, run_id)
    rows = [{"key": t.key, "problem": t.problem} for t in torn]
    if as_json:
        emit_json({"run_id": run_id, "checked": checked, "torn": rows})
    elif not rows:
        click.echo(f"{checked} objects of run {run_id} checked: none torn")
    else:
        emit_table(rows, ["key", "problem"], title=f"{len(rows)} of {checked} objects torn")
    if rows:
        sys.exit(1)

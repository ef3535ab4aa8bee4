"""docs/operations.md describes the asset graph the definitions really hold: the block between
the asset-graph markers is rendered from geo_pipeline.definitions (asset keys in dependency
order, their partitions definitions, deps with explicit partition mappings, checks, and what
each job selects).

Regenerate the block after changing the definitions:

    .venv/bin/python -m geo_pipeline_tests.dagster.test_dg_asset_graph_docs --write
"""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
BEGIN = "<!-- asset-graph:begin (generated: python -m geo_pipeline_tests.dagster.test_dg_asset_graph_docs --write) -->"
END = "<!-- asset-graph:end -->"


def describe_partitions(pd: dg.PartitionsDefinition | None) -> str:
    if pd is None:
        return "none"
    if isinstance(pd, dg.DynamicPartitionsDefinition):
        return f'dynamic "{pd.name}"'
    if isinstance(pd, dg.MultiPartitionsDefinition):
        dims = ", ".join(
            f"{d.name}: {describe_partitions(d.partitions_def)}" for d in pd.partitions_defs
        )
        return f"multi ({dims})"
    if isinstance(pd, dg.StaticPartitionsDefinition):
        return "static"
    if isinstance(pd, dg.TimeWindowPartitionsDefinition):
        return f"time window ({pd.cron_schedule}, {pd.timezone})"
    return type(pd).__name__


def _topological(graph: object, keys: set[dg.AssetKey]) -> list[dg.AssetKey]:
    """Upstream first; among assets whose upstreams are all placed, by name (stable text)."""
    placed: list[dg.AssetKey] = []
    left = set(keys)
    while left:
        ready = sorted(
            (k for k in left if not (graph.get(k).parent_keys & left)),  # type: ignore[attr-defined]
            key=lambda k: k.to_user_string(),
        )
        if not ready:  # a cycle cannot be loaded by Dagster; keep the renderer total anyway
            ready = sorted(left, key=lambda k: k.to_user_string())
        placed.append(ready[0])
        left.discard(ready[0])
    return placed


def render(defs: dg.Definitions) -> str:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    keys = set(graph.get_all_asset_keys())
    lines = ["assets (upstream first):"]
    for key in _topological(graph, keys):
        node = graph.get(key)
        lines.append(f"  {key.to_user_string()}")
        lines.append(f"    partitions: {describe_partitions(node.partitions_def)}")
        deps = []
        for parent in sorted(node.parent_keys, key=lambda k: k.to_user_string()):
            explicit = node.partition_mappings.get(parent)
            mapping = f" ({type(explicit).__name__})" if explicit is not None else ""
            deps.append(parent.to_user_string() + mapping)
        lines.append(f"    deps: {', '.join(deps) or '-'}")
        checks = sorted(k.name for k in node.check_keys)
        if checks:
            lines.append(f"    checks: {', '.join(checks)}")
    lines.append("jobs:")
    for job in sorted(repo.get_all_jobs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue
        selected = sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys)
        if selected:
            what = "assets " + ", ".join(selected)
        else:
            what = "ops " + ", ".join(sorted(n.name for n in job.graph.nodes))
        lines.append(f"  {job.name}: {what}")
    return "\n".join(["```text", *lines, "```"])


def rendered_block() -> str:
    from geo_pipeline.definitions import defs

    return f"{BEGIN}\n{render(defs)}\n{END}"


def current_block(text: str) -> str | None:
    start = text.find(BEGIN)
    end = text.find(END, start)
    if start < 0 or end < 0:
        return None
    return text[start : end + len(END)]


def test_operations_doc_holds_the_rendered_asset_graph() -> None:
    block = rendered_block()
    text = DOC.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, (
        f"{DOC} needs one block between {BEGIN!r} and {END!r}; it should read:\n{block}"
    )
    assert current_block(text) == block, (
        f"{DOC}'s asset graph is not the definitions'; regenerate with `python -m "
        f"geo_pipeline_tests.dagster.test_dg_asset_graph_docs --write`. It should read:\n{block}"
    )


def test_the_rendering_names_billing_partitioning_and_the_job_selections() -> None:
    """The renderer itself reads what it claims to (so an empty or stale rendering fails)."""
    from geo_pipeline.defs import names

    text = rendered_block()
    lines = text.splitlines()
    start = lines.index("  " + names.BILLING_RECONCILIATION.to_user_string())
    billing = [ln.strip() for ln in lines[start + 1 : start + 4] if ln.startswith("    ")]
    from geo_pipeline.definitions import defs

    node = defs.get_repository_def().asset_graph.get(names.BILLING_RECONCILIATION)
    assert f"partitions: {describe_partitions(node.partitions_def)}" in billing
    assert describe_partitions(node.partitions_def).startswith("dynamic ")
    assert any(
        ln.startswith("deps: " + names.COLLECTION_RESULTS.to_user_string()) for ln in billing
    )
    assert "billing_job: assets " in text and "create_collection_run: ops " in text


def main(argv: list[str]) -> int:
    block = rendered_block()
    if argv[1:] != ["--write"]:
        print(block)
        return 0
    text = DOC.read_text(encoding="utf-8")
    old = current_block(text)
    if old is None:
        print(f"{DOC}: no {BEGIN!r} ... {END!r} block to replace", file=sys.stderr)
        return 1
    DOC.write_text(text.replace(old, block), encoding="utf-8")
    print(f"wrote the asset graph into {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The repeats planner's answer where the eye is (issue 36 item 4): a structured table in the
output's metadata (``MetadataValue.table``) beside the Markdown one, and "unreachable" — not
``None`` — under repeats, samples and cost needed when the target cannot be reached."""

from __future__ import annotations

from typing import Any

import dagster as dg

from geo_pipeline.defs.collection.jobs import plan_collection_run
from geo_pipeline_tests.dagster.conftest import collection_config, op_metadata
from geo_pipeline_tests.dagster.test_launchpad import plan_run_config

NEEDED = ("repeats needed", "samples needed", "cost needed (minor)")


def test_an_unreachable_target_says_so_in_a_structured_table(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    # 2 questions cannot give ±0.05 with repeats alone under the stated ICC.
    result = plan_collection_run.execute_in_process(
        run_config=plan_run_config(collection_config(), target_half_width=0.05),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
    )
    assert result.success
    [output] = [e for e in result.all_events if e.is_successful_output]
    metadata = output.step_output_data.metadata
    markdown = metadata["precision"].value
    assert "None" not in markdown and "unreachable" in markdown, markdown
    table = metadata["precision table"]
    assert isinstance(table, dg.TableMetadataValue)
    columns = [c.name for c in table.schema.columns]
    assert columns[0] == "channel" and all(n in columns for n in NEEDED), columns
    rows = {r.data["channel"]: r.data for r in table.records}
    assert set(rows) == {"deepseek__web", "qwen__app"}
    for row in rows.values():
        assert all(row[n] == "unreachable" for n in NEEDED), row
    # The op's own output (what the CLI's --json also gives) keeps null for a machine.
    out = op_metadata(result, "plan_collection_op")["plan"]
    assert all(r["repeats needed"] is None for r in out["precision"])


def test_a_reachable_target_shows_its_numbers(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    # Ten questions: the question-to-question spread no longer caps what repeats can do.
    cfg = collection_config()
    cfg["questions"] = [f"Which project tool is best for team {i}?" for i in range(10)]
    result = plan_collection_run.execute_in_process(
        run_config=plan_run_config(cfg, target_half_width=0.3),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
    )
    assert result.success
    [output] = [e for e in result.all_events if e.is_successful_output]
    table = output.step_output_data.metadata["precision table"]
    out = {r["channel"]: r for r in op_metadata(result, "plan_collection_op")["plan"]["precision"]}
    for record in table.records:
        row = out[record.data["channel"]]
        assert row["repeats needed"] is not None
        assert record.data["repeats needed"] == str(row["repeats needed"])

"""The launchpad: a typed collection config that Dagster checks before a run starts (with every
mistake's path), a valid pre-filled example, and the repeats planner job that creates nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from geo_pipeline.cli.runs import precision_plans
from geo_pipeline.defs import names
from geo_pipeline.defs.collection.jobs import (
    CreateCollectionRunConfig,
    create_collection_run,
    plan_collection_run,
    plan_from_config,
)
from geo_pipeline.defs.launchpad import (
    EXAMPLE,
    BrandFields,
    ChannelFields,
    CollectionFields,
    collection_dict,
    example_fields,
)
from geo_pipeline.defs.resources import ConnectorRegistryResource
from geo_pipeline.domain.config_loading import load_config_file
from geo_pipeline.domain.config_model import BrandIn, ChannelIn, CollectionConfig
from geo_pipeline_tests.dagster.conftest import collection_config, fund, op_metadata
from geo_pipeline_tests.dagster.test_schedule_and_job import failure_text, row_counts

REPO = Path(__file__).resolve().parents[2]


def create_config(collection: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"ops": {"create_run_op": {"config": {"collection": collection, **extra}}}}


def eleven_mistakes() -> dict[str, Any]:
    cfg = collection_config()
    cfg["tenant"] = 42  # a number, not a string
    cfg["brand"] = {"nmae": "Acme"}  # misspelt, so name is missing too
    cfg["questions"] = "best project tool?"  # one string, not a list
    cfg["channels"][0]["platform"] = "chatgpt"  # not in the registry
    cfg["channels"][0]["device"] = "tablet"  # no platform has it
    cfg["channels"][0]["regions"] = ["mars"]
    cfg["channels"][1]["modes"] = ["telepathy"]
    cfg["channels"][1]["screenshot"] = "sometimes"  # required, optional or off
    cfg["repeats"] = "two"
    cfg["screenshot"] = "always"
    cfg["colour"] = "blue"  # no such field
    return cfg


# Each mistake and the path Dagster reports it at.
EXPECTED_PATHS = (
    "collection:tenant",
    'unexpected config entry "nmae" at path root:ops:create_run_op:config:collection:brand',
    'Missing required config entry "name" at path root:ops:create_run_op:config:collection:brand',
    "collection:questions",
    "collection:channels[0]:platform",
    "collection:channels[0]:device",
    "collection:channels[0]:regions[0]",
    "collection:channels[1]:modes[0]",
    "collection:channels[1]:screenshot",
    "collection:repeats",
    "collection:screenshot",
    'unexpected config entry "colour" at path root:ops:create_run_op:config:collection',
)


def test_the_launchpad_form_mirrors_the_domain_model() -> None:
    # One field per field of the model the CLI reads, with the same defaults.
    for form, model in (
        (CollectionFields, CollectionConfig),
        (BrandFields, BrandIn),
        (ChannelFields, ChannelIn),
    ):
        assert set(form.model_fields) == set(model.model_fields), form
        for name, field in model.model_fields.items():
            if not field.is_required():
                assert form.model_fields[name].default == field.default, (form, name)
            assert form.model_fields[name].is_required() == field.is_required(), (form, name)


def test_a_config_with_eleven_mistakes_is_refused_before_the_run_starts_with_each_path(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    fund(conn)
    before = row_counts(conn)
    run_config = create_config(eleven_mistakes())
    with pytest.raises(dg.DagsterInvalidConfigError) as refused:
        dg.validate_run_config(create_collection_run, run_config)
    text = str(refused.value)
    for path in EXPECTED_PATHS:
        assert path in text, (path, text)
    assert len(refused.value.errors) >= 11, text
    # Launching it never starts a run: no Dagster run, no row, no partition.
    with pytest.raises(dg.DagsterInvalidConfigError):
        create_collection_run.execute_in_process(
            run_config=run_config,
            instance=dg_instance,
            resources={k: resources[k] for k in ("db", "registry")},
        )
    assert dg_instance.get_runs() == []
    assert row_counts(conn) == before
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []


def test_the_prefilled_example_is_valid_and_creates_its_run(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    # Dagster accepts the job's default config as it stands (the launchpad's pre-filled form) ...
    assert dg.validate_run_config(create_collection_run) is not None
    assert dg.validate_run_config(plan_collection_run) is not None
    # ... the domain accepts it too, and it is a shortened examples/collection.yaml.
    example = collection_dict(example_fields())
    plan = plan_from_config(example, ConnectorRegistryResource(), "r-example", conn)
    assert plan.summary()["formula"] == "2 x 2 x 2 = 8"
    full = load_config_file(REPO / "examples" / "collection.yaml")
    assert example["brand"] == full["brand"]
    assert set(example["questions"]) <= {q.strip() for q in full["questions"]}
    # Launched unchanged, it creates the example's run.
    fund(conn, "acme")
    result = create_collection_run.execute_in_process(
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )
    assert result.success, failure_text(result)
    run_id = op_metadata(result, "create_run_op")["run_id"]
    row = conn.execute("SELECT sample_count FROM geo.runs WHERE run_id = %s", (run_id,)).fetchone()
    assert row["sample_count"] == 8
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == [run_id]


def test_the_typed_form_reaches_the_domain_as_the_cli_would_read_it(conn: Any) -> None:
    cfg = collection_config(monitor="daily-acme")
    typed = CreateCollectionRunConfig(collection=CollectionFields(**copy.deepcopy(cfg)))
    as_read = typed.collection_config()
    # Same config, same frozen snapshot, as the YAML with the same content.
    registry = ConnectorRegistryResource()
    assert (
        plan_from_config(as_read, registry, "r-1", conn).config.snapshot_id
        == plan_from_config(cfg, registry, "r-1", conn).config.snapshot_id
    )
    assert as_read["channels"][1]["screenshot"] == "off"  # an enum value, as plain text
    assert "regions" in as_read["channels"][0] and "monitor" in as_read
    assert EXAMPLE["tenant"] == "acme"


# --------------------------------------------------------------------------- repeats planner
def plan_run_config(collection: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"ops": {"plan_collection_op": {"config": {"collection": collection, **extra}}}}


def test_the_planner_job_reports_precision_and_cost_and_writes_nothing(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    fund(conn)
    before = row_counts(conn)
    cfg = collection_config()
    result = plan_collection_run.execute_in_process(
        run_config=plan_run_config(cfg, target_half_width=0.05, run_id="r-plan-1"),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
    )
    assert result.success
    # Nothing created, nothing reserved, no partition.
    assert row_counts(conn) == before
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []
    out = op_metadata(result, "plan_collection_op")["plan"]
    rows = {r["channel"]: r for r in out["precision"]}
    assert set(rows) == {"deepseek__web", "qwen__app"}
    # The same numbers as `geo-pipeline runs plan --target-half-width 0.05` (the same planner).
    plan = plan_from_config(cfg, ConnectorRegistryResource(), "r-plan-1", conn)
    for p in precision_plans(plan, 0.05, None):
        row = rows[p.channel]
        assert row["expected ±95%"] == round(p.half_width, 3)
        assert row["repeats needed"] == p.repeats_needed
        assert row["cost needed (minor)"] == (
            None if p.cost_needed is None else p.cost_needed.amount_minor
        )
        assert row["questions x repeats"] == "2 x 2"
    # 2 questions cannot give ±0.05 with repeats alone under the stated ICC: the advice says so.
    assert all(r["repeats needed"] is None for r in rows.values())
    assert all("add questions" in r["advice"] for r in rows.values())
    [output] = [e for e in result.all_events if e.is_successful_output]
    metadata = output.step_output_data.metadata
    assert metadata["estimated_max_minor"].value > 0
    assert "deepseek\\_\\_web" in metadata["precision"].value
    assert metadata["deepseek__web expected ±95%"].value == rows["deepseek__web"]["expected ±95%"]


def test_the_planner_job_refuses_what_the_run_would_refuse(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    cfg = collection_config()
    cfg["repeats"] = 0
    bad = plan_collection_run.execute_in_process(
        run_config=plan_run_config(cfg),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )
    assert not bad.success and "repeats:" in failure_text(bad)
    wide = plan_collection_run.execute_in_process(
        run_config=plan_run_config(collection_config(), target_half_width=0.7),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )
    assert not wide.success and "0 < x < 0.5" in failure_text(wide)


def test_an_environment_reference_in_the_launchpad_is_refused_and_writes_nothing(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any], monkeypatch: Any
) -> None:
    """Dagster's typed string fields accept ``{env: VAR}``: a launchpad user could copy a
    deployment secret into a brand name stored in the database and shown in reports."""
    monkeypatch.setenv("GEO_TEST_SECRET", "s3cr3t-value")
    fund(conn, "acme")
    cfg = collection_config()
    cfg["brand"] = {"name": {"env": "GEO_TEST_SECRET"}}
    cfg["questions"] = ["best tool?", {"env": "GEO_TEST_SECRET"}]
    before = row_counts(conn)
    result = create_collection_run.execute_in_process(
        run_config=create_config(cfg),
        instance=dg_instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )
    assert not result.success
    text = failure_text(result)
    assert "collection.brand.name" in text and "collection.questions[1]" in text, text
    assert "s3cr3t-value" not in text
    assert row_counts(conn) == before
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []

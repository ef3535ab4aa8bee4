"""The publish deadline: its config field (validated with its path, frozen into the snapshot),
when a partition is publishable and what it excludes, and the run keys that make each real
change one request."""

from __future__ import annotations

import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs import names
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_model import DEFAULT_PUBLISH_DEADLINE_SECONDS, NormalisedConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.states import Publication, combine_publications
from geo_pipeline_tests.unit.foundation.test_config import cfg

CAPS = load_registry().capabilities()


def test_deadline_defaults_to_six_hours_and_is_frozen_into_the_snapshot() -> None:
    n = normalise_and_validate(cfg(), CAPS)
    assert n.publish_deadline_seconds == DEFAULT_PUBLISH_DEADLINE_SECONDS == 6 * 3600
    assert n.canonical()["publish_deadline_seconds"] == 21600
    custom = normalise_and_validate(cfg(publish_deadline_seconds=3600), CAPS)
    assert custom.snapshot_id != n.snapshot_id  # a different deadline is a different snapshot
    assert NormalisedConfig.from_canonical(custom.canonical()) == custom


def test_a_snapshot_frozen_before_the_deadline_existed_reads_the_default() -> None:
    old = normalise_and_validate(cfg(), CAPS).canonical()
    del old["publish_deadline_seconds"]
    assert NormalisedConfig.from_canonical(old).publish_deadline_seconds == 21600


@pytest.mark.parametrize("value", [0, 59, 7 * 86400 + 1, -5])
def test_deadline_out_of_range_is_reported_with_its_path(value: int) -> None:
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(cfg(publish_deadline_seconds=value, repeats=0), CAPS)
    paths = [p.path for p in err.value.problems]
    assert paths == ["repeats", "publish_deadline_seconds"]  # every problem at once (R1)
    assert "allowed 60..604800 seconds" in str(err.value)


def test_deadline_of_the_wrong_type_is_a_field_error() -> None:
    with pytest.raises(ConfigError) as err:
        normalise_and_validate(cfg(publish_deadline_seconds="six hours"), CAPS)
    assert [p.path for p in err.value.problems] == ["publish_deadline_seconds"]


def pub(samples: int, terminal: int, passed: bool, **reasons: int) -> Publication:
    return Publication("r1", "deepseek__web", samples, terminal, passed, excluded_reasons=reasons)


def test_publishable_when_complete_or_past_the_deadline() -> None:
    assert pub(4, 4, False).basis == "complete"
    assert pub(4, 3, False).publishable is False and pub(4, 3, False).basis is None
    late = pub(4, 3, True, uncertain=1)
    assert late.publishable and late.basis == "deadline"
    assert (late.excluded, late.excluded_share) == (1, 0.25)
    assert late.as_metadata()["excluded_reasons"] == {"uncertain": 1}
    # A partition without samples (not part of the run) never publishes.
    assert pub(0, 0, True).publishable is False


def test_a_run_is_publishable_only_when_every_partition_is() -> None:
    web = pub(4, 3, True, running=1)
    app = Publication("r1", "qwen__app", 4, 2, True, excluded_reasons={"running": 2})
    run = combine_publications("r1", [web, app])
    assert run.publishable and run.basis == "deadline"
    assert (run.samples, run.terminal, dict(run.excluded_reasons)) == (8, 5, {"running": 3})
    waiting = Publication("r1", "qwen__app", 4, 2, False)
    assert combine_publications("r1", [web, waiting]).publishable is False
    done = combine_publications("r1", [pub(4, 4, False), pub(4, 4, False)])
    assert done.basis == "complete"


def test_run_keys_change_once_per_terminal_count_and_end_on_the_plain_key() -> None:
    plain = names.downstream_run_key("r1", "deepseek__web")
    assert names.downstream_run_key("r1", "deepseek__web", terminal=4, samples=4) == plain
    k3 = names.downstream_run_key("r1", "deepseek__web", terminal=3, samples=4)
    k2 = names.downstream_run_key("r1", "deepseek__web", terminal=2, samples=4)
    assert len({plain, k3, k2}) == 3
    assert k3 == names.downstream_run_key("r1", "deepseek__web", terminal=3, samples=4)
    assert names.billing_run_key("r1", terminal=8, samples=8) == names.billing_run_key("r1")
    assert names.billing_run_key("r1", terminal=7, samples=8) != names.billing_run_key("r1")

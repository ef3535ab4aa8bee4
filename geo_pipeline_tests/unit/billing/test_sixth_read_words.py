"""Issue 34, sixth read: words a newcomer found contradicting another place that says the same
thing (the source of a credit-billed service's cost, the reconcile hint, the demo's timeout)."""

from __future__ import annotations

from pathlib import Path

from geo_pipeline.billing.reconcile import source_words
from geo_pipeline.connectors.registry import load_registry

ROOT = Path(__file__).resolve().parents[3]


def test_a_credit_billed_service_is_not_said_to_be_reconciled_from_day_totals() -> None:
    """cloro is priced per task from the credits it reports (the demo's settlement line, the
    line detail, docs/services/cloro.md): ``billing reconcile``'s source line says the same."""
    entry = load_registry().every_entry()["chatgpt_cloro"]  # disabled without a key: same prices
    words = source_words(entry, ["cloro-2026-12-credits"])
    assert "day totals" not in words, words
    assert "per task" in words and "cloro-2026-12-credits" in words, words


def test_the_reconcile_hint_says_which_lines_it_lists() -> None:
    """``billing reconcile`` prints the lines that differ (a run with none: "no differences"),
    so the demo's caption must not promise every line."""
    text = (ROOT / "geo_pipeline" / "cli" / "ops.py").read_text(encoding="utf-8")
    assert "lists each line;" not in text
    assert "lists each line that differs" in text


def test_the_docs_say_what_the_demo_timeout_is() -> None:
    """``demo --timeout`` is an idle timeout (seconds without progress), not a total wait."""
    ops = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "`--timeout` (seconds to wait for the run)" not in ops
    assert "`--timeout` (seconds without progress" in ops


def test_the_progress_total_names_the_run_it_counts() -> None:
    """The demo's progress total counts the main run only, above bars that include the runs
    beside it: its label says so (sixth read: "all channels 50/50" above bars totalling 60)."""
    from geo_pipeline.cli.ops import MAIN_RUN_TOTAL

    assert "main run" in MAIN_RUN_TOTAL
    text = (ROOT / "geo_pipeline" / "cli" / "ops.py").read_text(encoding="utf-8")
    assert '("all channels", st)' not in text

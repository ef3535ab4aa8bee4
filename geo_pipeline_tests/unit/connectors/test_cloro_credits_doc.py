"""cloro's ChatGPT task in credits, said one way (issue #34, a fourth newcomer's read):
docs/services/cloro.md said "ChatGPT costs 5 credits" while the research file lists 7 credits for
ChatGPT "full" and 5 for "web search". The doc names both, says which one the shipped price
version, the simulator and the quote use, and what a 7-credit bill does to reconciliation."""

from __future__ import annotations

import re
from pathlib import Path

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.simulator.services.cloro import CREDITS

DOC = Path(__file__).resolve().parents[3] / "docs" / "services" / "cloro.md"


def test_the_doc_the_registry_and_the_simulator_agree_on_chatgpt_credits() -> None:
    text = re.sub(r"\s+", " ", DOC.read_text(encoding="utf-8"))
    reg = load_registry()
    entry = reg.entries.get("chatgpt_cloro") or reg.disabled["chatgpt_cloro"]  # keyless: disabled
    quoted = entry.capabilities.prices.credits["standard"]
    assert CREDITS["CHATGPT"] == quoted == 5, (CREDITS["CHATGPT"], quoted)
    said = 'ChatGPT: 7 credits for a "full" task, 5 for a "web search" task'
    assert said in text, f"cloro.md does not say {said!r}"
    used = "we ask for the web-search task: 5 credits"
    assert used in text, f"cloro.md does not say {used!r}"
    assert "ChatGPT costs 5 credits a task" not in text

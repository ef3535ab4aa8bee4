"""The answer's echo of its question is not a mention (issue 34, newcomer finding 9): through
the analysis of stored answers, the mention rows, the stance rows and a later re-stance all read
the answer's body only -- the question comes from the sample's question revision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from geo_pipeline.analysis import analyse_run
from geo_pipeline.analysis.stance import restance_run
from geo_pipeline.domain.stance import MentionStance, Span
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

QUESTION = "瑞幸和星巴克哪个更适合学生?"
# The simulator's Chinese opening (geo_pipeline.simulator.answers.generate_answer), as deepseek
# and others answer: the question in 「」, then the recommendations.
ANSWER = f"关于「{QUESTION}」，综合多方信息，推荐如下：\n\n1. **Manner**：性价比高。\n2. **星巴克**：环境好。"


@dataclass
class Recording:
    version: str = "stance-test-echo"
    seen: dict[str, list[Span]] = field(default_factory=dict)

    def detect(self, text: str, spans: dict[str, list[Span]]) -> dict[str, MentionStance]:
        self.seen.update({b: list(v) for b, v in spans.items()})
        return {b: MentionStance(b, "neutral", ("other",)) for b in spans}


def test_echoed_question_is_neither_counted_nor_ranked_nor_given_a_stance(db: Any) -> None:
    (sample,) = make_run(
        db, "r-echo", questions=[QUESTION], channels=[{"platform": "deepseek", "device": "web"}],
        repeats=1,
    )  # fmt: skip
    sid = sample["sample_id"]
    store_answer(db, sid, ANSWER)
    s = analyse_run(db, "r-echo")
    assert s.accepted == 1
    rows = {
        r["brand"]: r
        for r in db.execute(
            "SELECT brand, mentioned, mention_count, rank, first_offset FROM geo.mentions"
            " WHERE sample_id = %s",
            (sid,),
        ).fetchall()
    }
    assert not rows["瑞幸咖啡"]["mentioned"] and rows["瑞幸咖啡"]["rank"] is None
    assert (rows["Manner Coffee"]["rank"], rows["星巴克"]["rank"]) == (1, 2)
    assert rows["星巴克"]["mention_count"] == 1
    assert rows["星巴克"]["first_offset"] == ANSWER.index("**星巴克**") + 2
    stances = db.execute(
        "SELECT brand FROM geo.mention_stances WHERE sample_id = %s ORDER BY brand", (sid,)
    ).fetchall()
    assert sorted(r["brand"] for r in stances) == sorted(["Manner Coffee", "星巴克"])
    # A later stance version reads the same spans: the echo's 星巴克 is not among them.
    rec = Recording()
    restance_run(db, "r-echo", rec)
    assert rec.seen["星巴克"] == [(ANSWER.index("**星巴克**") + 2, ANSWER.index("**星巴克**") + 5)]
    assert "瑞幸咖啡" not in rec.seen

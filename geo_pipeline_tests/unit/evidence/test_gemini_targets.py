"""Gemini grounding citations keep Google's redirect as the raw URL and record the site the chunk
names (``web.domain``, else ``web.title``) as the normalised URL and registrable domain (R18)."""

from __future__ import annotations

import json

from geo_pipeline.connectors.parsers import parse_gemini
from geo_pipeline.evidence.recording import normalise_citations

REDIRECT = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/"


def test_gemini_citations_are_recorded_under_the_site_they_stand_for() -> None:
    text = "Luckin is cheapest. Starbucks is premium."
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "groundingChunks": [
                        {"web": {"uri": REDIRECT + "AAA", "title": "luckincoffee.com"}},
                        {
                            "web": {
                                "uri": REDIRECT + "BBB",
                                "title": "Starbucks",
                                "domain": "www.starbucks.com",
                            }
                        },
                        {"web": {"uri": REDIRECT + "CCC", "title": "A page title"}},
                    ],
                    "groundingSupports": [
                        {
                            "segment": {"startIndex": 0, "endIndex": 19},
                            "groundingChunkIndices": [0, 1],
                        }
                    ],
                },
            }
        ]
    }
    rows = normalise_citations(parse_gemini(json.dumps(body).encode()).citations)
    got = [(r.relation, r.raw_url, r.normalized_url, r.registrable_domain) for r in rows]
    assert got == [
        ("cited", REDIRECT + "AAA", "https://luckincoffee.com/", "luckincoffee.com"),
        ("cited", REDIRECT + "BBB", "https://www.starbucks.com/", "starbucks.com"),
        # no host named: the redirect itself, as before
        ("retrieved", REDIRECT + "CCC", REDIRECT + "CCC", "google.com"),
    ]

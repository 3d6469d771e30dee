"""A fact said in one language is found by a question in the other: the cross-lingual personal
facts (``tests/data/crosslingual_facts.jsonl``) through the real pipeline (broker, FalkorDB,
Milvus Lite, rules, local e5), hit@1 counted as ``bench/crosslingual.py`` counts it.

Issue 42 asks for hit@1 >= 0.90. Measured on the landed code: 0.814 (48/59), dev 0.900,
held-out 0.632, against 0.339 before turn ranking levelled the two languages
(``streams/core/crosslingual.py``). The remaining misses are mostly the small embedder's: a
levelled cosine alone ranks 50/59 answers first. The test holds the measured figure as a
floor (a drop below is a regression); the issue's bar is not met and is reported, with the
misses, by ``python bench/crosslingual.py`` — not by a test that cannot fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.crosslingual import PATH, ask, ingest, load, report
from tests.support.paths import DATA
from tests.support.pipeline import Pipeline

FLOOR = 0.80  # measured 0.814: a drop below is a regression
# A second set written blind (``crosslingual_heldout2.jsonl``, its misses never read): 0.683
# measured once, both directions above 0.5 (zh->en 0.533, en->zh 0.833).
BLIND_FLOOR = 0.65


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("path", "floor", "each_way"), [
    (PATH, FLOOR, FLOOR - 0.05),  # neither direction carries the other
    (DATA / "crosslingual_heldout2.jsonl", BLIND_FLOOR, 0.5),
], ids=["first-set", "blind-set"])
async def test_a_fact_said_in_one_language_is_found_by_a_question_in_the_other(
    pipeline: Pipeline, path: Path, floor: float, each_way: float,
) -> None:
    cubes = load(path)
    await ingest(pipeline.client, cubes)
    outcomes = await ask(pipeline.client, cubes)
    figure = report(outcomes)
    print(figure)
    rate = sum(o.hit for o in outcomes) / len(outcomes)
    assert rate >= floor, figure
    for direction in ("zh->en", "en->zh"):
        part = [o for o in outcomes if o.direction == direction]
        assert sum(o.hit for o in part) / len(part) >= each_way, figure

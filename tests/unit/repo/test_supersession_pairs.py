"""The supersession set (``tests/data/supersession_pairs.jsonl``, read by
``bench/supersession.py``) has the shape the bench counts on: enough pairs, half of them or
more explicit changes, every near-miss kind, both languages and mixed pairs, and terms that
tell the current fact's hits from the stale one's. The held-out sets
(``supersession_heldout3.jsonl`` to ``8``) are held to the same per-pair checks."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from tests.support.paths import DATA


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line)
            for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


Pairs = list[dict[str, Any]]
PAIRS = load("supersession_pairs.jsonl")
HELDOUT3 = load("supersession_heldout3.jsonl")
HELDOUT4 = load("supersession_heldout4.jsonl")
HELDOUT5 = load("supersession_heldout5.jsonl")
LATER = {n: load(f"supersession_heldout{n}.jsonl") for n in (6, 7, 8)}
EVERY_SET = pytest.mark.parametrize(
    "pairs", [PAIRS, HELDOUT3, HELDOUT4, HELDOUT5, *LATER.values()],
    ids=["pairs", "heldout3", "heldout4", "heldout5", *(f"heldout{n}" for n in LATER)])
NEAR_MISS_KINDS = {"plan", "trip", "other_person", "other_time", "hypothetical",
                   "other_attribute"}
CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORDS = re.compile(r"[A-Za-z]{3,}")


def chinese(text: str) -> bool:
    return len(CJK.findall(text)) >= 3


def english(text: str) -> bool:
    return not CJK.search(text) and len(LATIN_WORDS.findall(text)) >= 2


def holds(text: str, terms: list[str]) -> bool:
    return any(t.lower() in text.lower() for t in terms)


@EVERY_SET
def test_every_line_has_the_fields_the_bench_reads(pairs: Pairs) -> None:
    fields = {"id", "lang", "kind", "old", "new", "question", "current", "answer_terms",
              "stale_terms"}
    for pair in pairs:
        assert fields <= pair.keys(), pair.get("id")
        for which in ("old", "new"):
            assert pair[which]["text"].strip(), pair["id"]
        assert pair["question"].rstrip().endswith(("?", "？")), pair["id"]
        assert pair["answer_terms"] and pair["stale_terms"], pair["id"]
    assert len({p["id"] for p in pairs}) == len(pairs)


@EVERY_SET
def test_the_later_statement_is_said_on_a_later_day_with_a_timezone(pairs: Pairs) -> None:
    for pair in pairs:
        old, new = (datetime.fromisoformat(pair[w]["said_at"]) for w in ("old", "new"))
        assert old.tzinfo is not None and new.tzinfo is not None, pair["id"]
        assert new.date() > old.date(), pair["id"]


def test_composition_by_kind() -> None:
    kinds = Counter(p["kind"] for p in PAIRS)
    assert len(PAIRS) >= 80
    assert kinds["change"] * 2 >= len(PAIRS)  # half or more are explicit changes
    assert set(kinds) == {"change", *NEAR_MISS_KINDS}
    assert all(kinds[k] >= 5 for k in NEAR_MISS_KINDS), kinds
    negations = [p for p in PAIRS if p["kind"] == "change" and p.get("marker") == "negation"]
    assert len(negations) >= 5  # "I don't eat meat anymore", "我已经不抽烟了"
    assert len({p["attribute"] for p in PAIRS}) >= 15


def test_composition_by_language() -> None:
    langs = Counter(p["lang"] for p in PAIRS)
    assert set(langs) == {"en", "zh", "mixed"}
    assert langs["mixed"] >= 10
    by = Counter((p["lang"], p["kind"] == "change") for p in PAIRS)
    assert all(by[(lang, change)] >= 5 for lang in ("en", "zh") for change in (True, False)), by
    assert by[("mixed", True)] >= 5 and by[("mixed", False)] >= 5, by
    for kind in NEAR_MISS_KINDS:  # each near-miss kind in both languages
        assert {p["lang"] for p in PAIRS if p["kind"] == kind} >= {"en", "zh"}, kind


@EVERY_SET
def test_the_languages_are_what_the_label_says(pairs: Pairs) -> None:
    for pair in pairs:
        texts = (pair["old"]["text"], pair["new"]["text"])
        match pair["lang"]:
            case "en":
                assert all(english(t) for t in texts), pair["id"]
            case "zh":
                assert all(chinese(t) for t in texts), pair["id"]
            case "mixed":
                assert sorted(map(chinese, texts)) == [False, True], pair["id"]
                assert any(english(t) for t in texts), pair["id"]


@EVERY_SET
def test_the_terms_tell_the_current_fact_from_the_stale_one(pairs: Pairs) -> None:
    for pair in pairs:
        change = pair["kind"] == "change"
        assert pair["current"] == ("new" if change else "old"), pair["id"]
        current = pair[pair["current"]]["text"]
        other = pair["new" if pair["current"] == "old" else "old"]["text"]
        assert holds(current, pair["answer_terms"]), pair["id"]
        assert holds(other, pair["stale_terms"]), pair["id"]
        if change:  # the earlier fact's hits count as stale only if they hold no answer term
            assert not holds(other, pair["answer_terms"]), pair["id"]


@pytest.mark.parametrize("pairs", [PAIRS, HELDOUT3], ids=["pairs", "heldout3"])
def test_the_statements_are_the_users_own_and_distinct(pairs: Pairs) -> None:
    # chat writes "i", "im", "ive" as often as "I"
    first_person = re.compile(r"\b(i|i'm|im|i've|ive|i'd|my|me|we|our|us)\b|我", re.IGNORECASE)
    for pair in pairs:
        assert pair["old"]["text"] != pair["new"]["text"], pair["id"]
        for which in ("old", "new"):
            assert first_person.search(pair[which]["text"]), (pair["id"], which)


def test_the_heldout_set_composition() -> None:
    kinds = Counter(p["kind"] for p in HELDOUT3)
    assert len(HELDOUT3) == 60 and kinds["change"] == 30
    assert all(kinds[k] == 5 for k in NEAR_MISS_KINDS), kinds
    assert all(p["id"].startswith("ho3-") for p in HELDOUT3)
    by = Counter((p["lang"], p["kind"] == "change") for p in HELDOUT3)
    for change in (True, False):
        assert (by[("en", change)], by[("zh", change)], by[("mixed", change)]) == (13, 11, 6), by
    for kind in NEAR_MISS_KINDS:
        assert {p["lang"] for p in HELDOUT3 if p["kind"] == kind} >= {"en", "zh"}, kind

"""The cross-lingual facts (``tests/data/crosslingual_facts.jsonl`` and the set written blind,
``crosslingual_heldout2.jsonl``, asked by ``tests/e2e/test_crosslingual_facts.py`` and
``bench/crosslingual.py``) have the shape hit@1 counts on: enough questions in each direction,
each answered by a statement of its cube in the other language, among distractors in both
languages, with a held-out third."""

from __future__ import annotations

from collections import Counter

import pytest

from memstream.streams.text.words import script_of, split_sentences
from tests.support.crosslingual import Cube, Outcome, Question, load
from tests.support.paths import DATA

SETS = {"first": load(), "blind": load(DATA / "crosslingual_heldout2.jsonl")}
SCRIPT = {"zh": "zh", "en": "latin"}
each_set = pytest.mark.parametrize("name", sorted(SETS))


def _questions(cubes: list[Cube]) -> list[tuple[Cube, Question]]:
    return [(c, q) for c in cubes for q in c.questions]


@each_set
def test_enough_questions_about_half_in_each_direction(name: str) -> None:
    questions = _questions(SETS[name])
    directions = Counter(Outcome(c, q, None).direction for c, q in questions)
    assert len(questions) >= 40
    assert set(directions) == {"zh->en", "en->zh"}
    assert min(directions.values()) * 2 >= len(questions) * 0.9, directions  # 45 % or more


@each_set
def test_every_answer_is_a_statement_of_its_cube_in_the_other_language(name: str) -> None:
    for cube, question in _questions(SETS[name]):
        answer = cube.statement(question.answer)  # exactly one statement has the id
        assert answer.lang != question.lang, question.id
        assert question.question.rstrip().endswith(("?", "？")), question.id


@each_set
def test_the_languages_are_what_the_labels_say(name: str) -> None:
    for cube in SETS[name]:
        for statement in cube.statements:
            assert script_of(statement.text) == SCRIPT[statement.lang], statement.id
        for question in cube.questions:
            assert script_of(question.question) == SCRIPT[question.lang], question.id


@each_set
def test_each_cube_holds_distractors_in_both_languages(name: str) -> None:
    for cube in SETS[name]:
        langs = Counter(s.lang for s in cube.statements)
        assert len(cube.statements) >= 6 and min(langs["zh"], langs["en"]) >= 3, cube.cube
        # more statements than questions: some facts are only ever distractors
        assert len({q.answer for q in cube.questions}) == len(cube.questions) <= \
            len(cube.statements), cube.cube


@each_set
def test_each_statement_is_one_sentence_said_by_the_user(name: str) -> None:
    """The rules stand-in stores a user's sentences one by one: a statement of two sentences
    would be two memories, and the answer one of them."""
    ids = [s.id for c in SETS[name] for s in c.statements]
    assert len(ids) == len(set(ids))
    for cube in SETS[name]:
        for statement in cube.statements:
            assert len(split_sentences(statement.text)) == 1, statement.id
            assert "我" in statement.text or " I" in f" {statement.text}" or \
                statement.text.lower().startswith(("my ", "we")), statement.id


def test_a_third_of_the_first_set_is_held_out_and_the_blind_set_all() -> None:
    first = SETS["first"]
    splits = Counter(c.split for c in first)
    assert set(splits) == {"dev", "heldout"} and splits["heldout"] * 3 == len(first)
    held = sum(len(c.questions) for c in first if c.split == "heldout")
    assert 0.28 <= held / len(_questions(first)) <= 0.40
    for cubes in SETS.values():
        assert len({c.cube for c in cubes}) == len(cubes)
    assert {c.split for c in SETS["blind"]} == {"heldout"}

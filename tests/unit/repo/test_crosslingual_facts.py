"""The cross-lingual facts (``tests/data/crosslingual_facts.jsonl``, asked by
``tests/e2e/test_crosslingual_facts.py`` and ``bench/crosslingual.py``) have the shape hit@1
counts on: enough questions in each direction, each answered by a statement of its cube in the
other language, among distractors in both languages, with a held-out third."""

from __future__ import annotations

from collections import Counter

from memstream.streams.text.words import script_of, split_sentences
from tests.support.crosslingual import Outcome, load

CUBES = load()
QUESTIONS = [(c, q) for c in CUBES for q in c.questions]
SCRIPT = {"zh": "zh", "en": "latin"}


def test_enough_questions_about_half_in_each_direction() -> None:
    directions = Counter(Outcome(c, q, None).direction for c, q in QUESTIONS)
    assert len(QUESTIONS) >= 40
    assert set(directions) == {"zh->en", "en->zh"}
    assert min(directions.values()) * 2 >= len(QUESTIONS) * 0.9, directions  # 45 % or more


def test_every_answer_is_a_statement_of_its_cube_in_the_other_language() -> None:
    for cube, question in QUESTIONS:
        answer = cube.statement(question.answer)  # exactly one statement has the id
        assert answer.lang != question.lang, question.id
        assert question.question.rstrip().endswith(("?", "？")), question.id


def test_the_languages_are_what_the_labels_say() -> None:
    for cube in CUBES:
        for statement in cube.statements:
            assert script_of(statement.text) == SCRIPT[statement.lang], statement.id
        for question in cube.questions:
            assert script_of(question.question) == SCRIPT[question.lang], question.id


def test_each_cube_holds_distractors_in_both_languages() -> None:
    for cube in CUBES:
        langs = Counter(s.lang for s in cube.statements)
        assert len(cube.statements) >= 6 and min(langs["zh"], langs["en"]) >= 3, cube.cube
        # more statements than questions: some facts are only ever distractors
        assert len({q.answer for q in cube.questions}) == len(cube.questions) <= \
            len(cube.statements), cube.cube


def test_each_statement_is_one_sentence_said_by_the_user() -> None:
    """The rules stand-in stores a user's sentences one by one: a statement of two sentences
    would be two memories, and the answer one of them."""
    ids = [s.id for c in CUBES for s in c.statements]
    assert len(ids) == len(set(ids))
    for cube in CUBES:
        for statement in cube.statements:
            assert len(split_sentences(statement.text)) == 1, statement.id
            assert "我" in statement.text or " I" in f" {statement.text}" or \
                statement.text.lower().startswith(("my ", "we")), statement.id


def test_a_third_of_the_cubes_is_held_out() -> None:
    splits = Counter(c.split for c in CUBES)
    assert set(splits) == {"dev", "heldout"} and splits["heldout"] * 3 == len(CUBES)
    held = sum(len(c.questions) for c in CUBES if c.split == "heldout")
    assert 0.28 <= held / len(QUESTIONS) <= 0.40
    assert len({c.cube for c in CUBES}) == len(CUBES)

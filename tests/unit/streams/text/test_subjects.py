"""The subject guard: statements about different subjects are never merged; true merges stay."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.conflict import RELATION_JUDGE
from memstream.streams.text.subjects import compare, different_subjects, subject_of
from tests.support.statements import NEAR_MISS_PAIRS, judge_context

# Near-miss classes about one subject: the judge, not the subject guard, keeps them.
SAME_SUBJECT_KINDS = {"plan-vs-residence", "trip-vs-home", "different-time"}


def test_the_subject_guard_catches_every_near_miss_pair_about_different_subjects() -> None:
    """The add stage's guard (before any judge, model or rules) holds on its own."""
    missed = [(p["old"], p["new"]) for p in NEAR_MISS_PAIRS if p["kind"] not in SAME_SUBJECT_KINDS
              and different_subjects(p["old"], p["new"]) is None]
    assert missed == []


def test_the_near_miss_set_has_every_same_subject_class_in_each_language() -> None:
    classes = {(p["kind"], p["lang"]) for p in NEAR_MISS_PAIRS if p["kind"] in SAME_SUBJECT_KINDS}
    assert classes == {(k, lang) for k in SAME_SUBJECT_KINDS for lang in ("en", "zh", "mixed")}


@pytest.mark.parametrize(("old", "new"), [
    ("I live in Berlin.", "I moved to Munich."),
    ("Anna lives in Paris.", "Anna now lives in Rome."),
    ("我住在北京。", "我搬到上海了。"),
    ("Melanie: I live in Boston.", "Melanie: I moved to Denver."),
    ("My sister lives in Paris.", "My sister moved to Rome."),
    ("小王住在上海。", "小王搬到了北京。"),
    ("用户的朋友小王住在上海。", "小王搬到了北京。"),
    ("Anna Kowalski lives in Lisbon.", "Anna moved to Porto."),
    ("The user lives in Berlin.", "The user moved to Lisbon."),
])
def test_same_subject_changes_still_contradict(old: str, new: str) -> None:
    assert different_subjects(old, new) is None
    assert stand_in(RELATION_JUDGE)(judge_context(old, new, 0.9)).relation == "contradictory"


@pytest.mark.parametrize(("old", "new"), [
    ("I love hiking in the mountains.", "I really enjoy mountain hiking."),
    ("The user's daughter Emma was born on 2019-03-14.",
     "Emma, the user's daughter, was born on March 14, 2019."),
    ("The user's favorite band is Radiohead.", "Radiohead is the user's favourite band."),
])
def test_rewordings_about_one_subject_are_not_separated(old: str, new: str) -> None:
    assert different_subjects(old, new) is None


@pytest.mark.parametrize(("text", "keys"), [
    ("I live in Berlin.", {"self"}),
    ("My car is a white Honda.", {"self"}),
    ("My older sister is a dentist.", {"rel:self/elder-sister"}),
    ("The user's son Leo plays the violin.", {"rel:self/son", "name:leo"}),
    ("Anna Kowalski lives in Lisbon.", {"name:anna kowalski"}),
    ("Anna's brother lives in Paris.", {"rel:name:anna/brother"}),
    ("Melanie: I painted a sunrise.", {"name:melanie", "self@melanie"}),
    ("Melanie: my kids love the beach.", {"rel:name:melanie/child"}),
    ("The iPhone 15 costs 799 dollars.", {"name:iphone 15"}),
    ("Every weekend, Lucia goes hiking.", {"name:lucia"}),
    ("我住在北京。", {"self"}),
    ("我的车是白色的。", {"self"}),
    ("我妹妹住在上海。", {"rel:self/younger-sister"}),
    ("王芳的妹妹住在北京。", {"rel:name:王芳/younger-sister"}),
    ("小王搬到了北京。", {"name:小王"}),
    ("小李：我住在上海。", {"name:小李", "self@小李"}),
    ("She moved to Rome.", set()),
    ("他住在北京。", set()),
])
def test_subjects_of_first_third_person_and_speaker_text(text: str, keys: set[str]) -> None:
    assert set(subject_of(text).keys) == keys


def test_unclear_subjects_are_left_to_the_judge() -> None:
    # a pronoun, or a bare "I" against a named speaker who may be the user
    for old, new in [("She lives in Paris.", "Boris lives in Rome."),
                     ("Melanie: I painted a sunrise.", "I painted a sunrise.")]:
        assert compare(subject_of(old), subject_of(new), old, new) == "unknown"
    # a subject the other statement names is not "different" either
    old, new = "Anna's sister lives in Paris.", "Anna lives in Paris."
    assert compare(subject_of(old), subject_of(new), old, new) == "unknown"


def test_metadata_entities_stand_in_for_a_pronoun() -> None:
    assert different_subjects("She lives in Paris.", "He lives in Rome.") is None
    reason = different_subjects("She lives in Paris.", "He lives in Rome.",
                                ["Anna", "Paris"], ["Boris", "Rome"])
    assert reason is not None and "anna" in reason
    assert different_subjects("She lives in Paris.", "Anna moved to Rome.", ["Anna"], []) is None
    answer = stand_in(RELATION_JUDGE)(judge_context("She lives in Paris.", "He lives in Rome.",
                                                    0.95, ("Anna",), ("Boris",)))
    assert answer.relation == "independent"

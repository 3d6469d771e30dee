"""What the group tasks share (streams/prompts/members.py): members, tag statistics,
sentences and title words."""

from __future__ import annotations

from memstream.streams.prompts.members import (
    MemberNote,
    is_generic,
    ranked_tags,
    sentences,
    statement,
    title_word,
)
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.members import m


def test_generic_tags_are_kinds_of_memory_not_subjects() -> None:
    for tag in ("preference", "Plan", "user", "habit", "偏好", "计划", "个人信息", " ", "x"):
        assert is_generic(tag), tag
    for tag in ("hiking", "Berlin", "饺子", "猫", "AWS"):
        assert not is_generic(tag), tag


def test_member_from_a_stored_node() -> None:
    item = MemoryItem(id="c1", memory="The user hikes in the Alps.", metadata=MemoryMetadata(
        user_id="u", cube_id="u", memory_type="LongTermMemory", key="hiking",
        tags=("hiking", "alps"), hierarchy_level="concept"))
    assert MemberNote.of(item) == m("The user hikes in the Alps.", "hiking", "hiking", "alps")


def test_ranked_tags_count_each_member_once_case_insensitively() -> None:
    ranked = ranked_tags([["hiking", "Hiking", "gear"], ["HIKING", "alps"], ["alps"]])
    assert ranked == [("hiking", 2), ("alps", 2), ("gear", 1)]


def test_sentences_are_never_cut_in_two() -> None:
    assert sentences("The user met Dr. Smith at 3 p.m. today. Then she left! 用户喜欢猫。它三岁。"
                     ) == ["The user met Dr. Smith at 3 p.m. today.", "Then she left!",
                           "用户喜欢猫。", "它三岁。"]
    assert sentences("J. R. R. Tolkien is the user's favourite author.") == [
        "J. R. R. Tolkien is the user's favourite author."]
    assert statement("lives Berlin works nurse;") == "lives Berlin works nurse."
    assert title_word("mov", ["The user moved to Berlin."]) is None
    assert title_word("mountain", ["The user likes mountains."]) == "mountain"
    assert title_word("alps", ["The user likes mountains."]) == "alps"  # a label, as given
    assert title_word("berlin", ["The user moved to Berlin."]) == "Berlin"
    assert title_word("berlin,", ["x"]) is None and title_word("做饭，", ["x"]) is None

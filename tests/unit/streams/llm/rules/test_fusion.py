"""The rules stand-in for fusion (streams/llm/rules/fusion.py): which statement survives a
merge, and with which tags."""

from __future__ import annotations

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.conflict import MemoryStatement, Relation
from memstream.streams.prompts.fusion import FUSION, FusionContext, FusionResponse
from tests.support.statements import T0, T1, mem


def fuse(existing: MemoryStatement, new: MemoryStatement, rel: Relation) -> FusionResponse:
    return stand_in(FUSION)(FusionContext(existing=existing, new=new, relation=rel))


def test_contradiction_keeps_the_newer_statement_and_drops_stale_tags() -> None:
    old = mem("The user lives in Berlin.", T0, key="home city", tags=["Berlin", "residence"])
    new = mem("The user moved to Lisbon.", T1, key="move to Lisbon", tags=["lisbon", "move"])
    fused = fuse(old, new, "contradictory")
    assert fused.memory == "The user moved to Lisbon."
    assert fused.key == "move to Lisbon"
    assert fused.tags == ["lisbon", "move", "residence"]


def test_contradiction_goes_by_timestamp_not_by_argument_order() -> None:
    """A redelivered older event must not overwrite the newer stored fact."""
    stored = mem("用户搬到了里斯本。", T1, tags=["里斯本"])
    late = mem("用户住在柏林。", T0, tags=["柏林"])
    fused = fuse(stored, late, "contradictory")
    assert fused.memory == "用户搬到了里斯本。"
    assert fused.tags == ["里斯本"]


def test_redundant_keeps_the_more_informative_statement_even_if_older() -> None:
    old = mem("The user is learning Spanish with a tutor twice a week.", T0, tags=["spanish"])
    new = mem("The user is learning Spanish.", T1, key="Spanish", tags=["Spanish", "language"])
    fused = fuse(old, new, "redundant")
    assert fused.memory == old.text
    assert fused.key == "Spanish"
    assert fused.tags == ["spanish", "language"]


def test_redundant_equally_informative_keeps_the_newer_wording() -> None:
    old = mem("The user's favorite band is Radiohead.", T0)
    new = mem("Radiohead is the user's favourite band.", T1)
    assert fuse(old, new, "redundant").memory == new.text
    swapped = (new.model_copy(update={"updated_at": T0}), old.model_copy(update={"updated_at": T1}))
    assert fuse(*swapped, "redundant").memory == old.text


def test_independent_fusion_keeps_both_facts_in_their_language() -> None:
    en = fuse(mem("The user likes coffee"), mem("The user likes jazz music.", T1), "independent")
    assert en.memory == "The user likes coffee. The user likes jazz music."
    zh = fuse(mem("用户喜欢喝咖啡"), mem("用户喜欢听爵士乐。", T1), "independent")
    assert zh.memory == "用户喜欢喝咖啡。用户喜欢听爵士乐。"
    assert en.key == "The user likes coffee" and zh.key == "用户喜欢喝咖啡"

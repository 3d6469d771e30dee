"""The rules stand-ins of the Searcher's tasks (streams/llm/rules/search.py): goals and the
reasoner's selection."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.search import rules_goal, rules_reasoner
from memstream.streams.prompts.search import (
    GOAL_PARSER,
    REASONER,
    GoalResponse,
    ReasonerContext,
)
from tests.support.searcher import CANDIDATES, IDS, goal

# --------------------------------------------------------------------------- rules_goal


def test_rules_goal_english_question() -> None:
    answer = rules_goal(goal("When is my flight to Lisbon?"))
    assert answer.keys == ["flight", "Lisbon"]
    assert answer.tags == ["flight", "lisbon"]
    assert answer.goal_type == "qa"
    assert answer.rephrased_instruction == "When is my flight to Lisbon?"
    assert answer.internet_search is False
    assert 2 <= len(answer.memories) <= 5
    assert answer.memories[0] == "When is my flight to Lisbon?"
    assert any(m.startswith("The user") and "Lisbon" in m for m in answer.memories[1:])
    assert all(" my " not in m for m in answer.memories[1:])


def test_rules_goal_chinese_stays_chinese() -> None:
    answer = rules_goal(goal("我的航班是什么时候？"))
    assert answer.keys == ["航班"] and answer.goal_type == "qa"
    assert 2 <= len(answer.memories) <= 5
    assert any("用户" in m and "航班" in m for m in answer.memories)
    assert not any("user" in m.lower() for m in answer.memories)


@pytest.mark.parametrize(
    ("query", "goal_type"),
    [
        ("Write an email to my boss about the deadline", "generation"),
        ("Could you please draft a packing list for Lisbon?", "generation"),
        ("帮我写一封邮件给老板", "generation"),
        ("what did I say about the dentist", "qa"),
        ("这周还能去跑步吗", "qa"),
        ("my favourite coffee", "retrieval"),
        ("我喜欢的咖啡", "retrieval"),
    ],
)
def test_rules_goal_type_cues(query: str, goal_type: str) -> None:
    assert rules_goal(goal(query)).goal_type == goal_type


def test_rules_goal_keeps_generation_verbs_out_of_keys() -> None:
    assert rules_goal(goal("Write an email to my boss")).keys == ["email", "boss"]


@pytest.mark.parametrize("query", ["hi", "Hi!", "我", "?"])
def test_rules_goal_always_valid_even_without_keywords(query: str) -> None:
    answer = rules_goal(goal(query))
    assert answer.keys and len(answer.memories) >= 2
    GoalResponse.model_validate(answer.model_dump())


async def test_goal_parser_runs_through_the_rules_provider() -> None:
    answer = await RulesLLM().run(GOAL_PARSER, goal("When is my flight to Lisbon?"))
    assert isinstance(answer, GoalResponse) and "Lisbon" in answer.keys


# --------------------------------------------------------------------------- reasoner


def test_rules_reasoner_keeps_candidates_sharing_a_keyword_in_rank_order() -> None:
    answer = rules_reasoner(ReasonerContext(query="When is my flight?", candidates=CANDIDATES))
    assert answer.selected_ids == [IDS[0], IDS[2]]
    zh = rules_reasoner(ReasonerContext(query="我的航班是几号？", candidates=CANDIDATES))
    assert zh.selected_ids == [IDS[3]]


def test_rules_reasoner_keeps_everything_when_nothing_matches() -> None:
    answer = rules_reasoner(ReasonerContext(query="any news?", candidates=CANDIDATES))
    assert answer.selected_ids == IDS[:4]


async def test_reasoner_runs_through_the_rules_provider() -> None:
    ctx = ReasonerContext(query="Lisbon flight", candidates=CANDIDATES)
    answer = await RulesLLM().run(REASONER, ctx)
    assert answer.selected_ids == [IDS[0], IDS[2]]

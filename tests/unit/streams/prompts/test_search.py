"""The Searcher's model tasks (streams/prompts/search.py): goal parsing and memory
selection, their prompts and the answers they accept."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.prompts.search import (
    GOAL_PARSER,
    GoalContext,
    GoalResponse,
    ReasonerContext,
    ReasonerResponse,
    fallback_ids_from_text,
    render_goal,
    render_reasoner,
)
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message
from tests.support.searcher import CANDIDATES, IDS, goal


def valid_goal(**overrides: object) -> dict[str, object]:
    answer: dict[str, object] = {
        "keys": ["flight"],
        "tags": ["travel"],
        "goal_type": "qa",
        "rephrased_instruction": "When is the user's flight to Lisbon?",
        "internet_search": False,
        "memories": ["The user's flight to Lisbon is on ...", "The user flies to Lisbon."],
    }
    answer.update(overrides)
    return answer


# --------------------------------------------------------------------------- GoalResponse


@pytest.mark.parametrize("count", [1, 6])
def test_goal_response_rejects_too_few_or_too_many_rephrasings(count: int) -> None:
    memories = [f"The user mentioned topic {i}." for i in range(count)]
    with pytest.raises(ValidationError, match="memories"):
        GoalResponse.model_validate(valid_goal(memories=memories))


@pytest.mark.parametrize("count", [2, 5])
def test_goal_response_accepts_two_to_five_rephrasings(count: int) -> None:
    memories = [f"The user mentioned topic {i}." for i in range(count)]
    assert len(GoalResponse.model_validate(valid_goal(memories=memories)).memories) == count


def test_goal_response_trims_and_does_not_count_blanks_or_repeats() -> None:
    answer = GoalResponse.model_validate(
        valid_goal(
            memories=["  The user flies to Lisbon.  ", "", "The user books a hotel.", "   "],
            keys=[" flight ", "flight", ""],
        )
    )
    assert answer.keys == ["flight"]
    assert answer.memories == ["The user flies to Lisbon.", "The user books a hotel."]
    with pytest.raises(ValidationError, match="memories"):
        # two entries, but only one distinct statement once case and spaces are ignored
        GoalResponse.model_validate(valid_goal(memories=["A trip.", " a trip. "]))


def test_goal_response_goal_type_is_normalised_and_checked() -> None:
    assert GoalResponse.model_validate(valid_goal(goal_type=" QA ")).goal_type == "qa"
    with pytest.raises(ValidationError, match="goal_type"):
        GoalResponse.model_validate(valid_goal(goal_type="chitchat"))
    with pytest.raises(ValidationError, match="keys"):
        GoalResponse.model_validate(valid_goal(keys=[]))


# --------------------------------------------------------------------------- render_goal


def test_goal_prompt_carries_query_history_memories_and_time() -> None:
    history = [{"role": "user", "content": f"turn {i}"} for i in range(12)]
    history.append({"role": "assistant", "content": "Your sister Mei lands at 9."})
    ctx = goal(
        "When does she arrive?",
        chat_history=history,
        context_memories=["The user's sister Mei visits in May."],
    )
    system, user = render_goal(ctx)
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    assert "Query: When does she arrive?" in text
    assert "Your sister Mei lands at 9." in text
    assert "The user's sister Mei visits in May." in text
    assert "2025-05-02T18:30" in text and "Friday" in text
    # only the recent turns are sent
    assert "turn 11" in text and "turn 2\n" not in text and "turn 0" not in text
    assert "pronouns" in system["content"] and "Do not add facts" in system["content"]
    assert "JSON object and nothing else" in system["content"]
    assert text.rstrip().endswith("Answer with the JSON object only.")


def test_goal_prompt_states_the_language_of_the_query() -> None:
    zh_system = render_goal(goal("我下周去上海出差要带什么？"))[0]["content"]
    en_system = render_goal(goal("What should I pack for my trip to Shanghai next week?"))[0][
        "content"
    ]
    assert "The query is in Chinese" in zh_system and "Never translate" in zh_system
    assert "The query is in English" in en_system


def test_goal_prompt_is_rendered_at_call_time() -> None:
    later = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    first = render_goal(goal("my plans"))[1]["content"]
    second = render_goal(GoalContext(query="my plans", now=later))[1]["content"]
    assert "2025-05-02" in first and "2026-01-01" in second


async def test_goal_parser_with_six_rephrasings_is_retried_with_feedback(
    scripted_openai: ScriptedOpenAI,
) -> None:
    six = [f"The user flies to Lisbon ({i})." for i in range(6)]
    scripted_openai.enqueue(Reply.json(valid_goal(memories=six)), Reply.json(valid_goal()))
    llm = OpenAILLM(scripted_openai.llm_settings())
    answer = await llm.run(GOAL_PARSER, goal("When is my flight to Lisbon?"))
    assert answer.memories == valid_goal()["memories"]
    assert len(scripted_openai.chat_requests) == 2
    assert "memories" in last_user_message(scripted_openai.chat_requests[1])
    await llm.close()


# --------------------------------------------------------------------------- reasoner


def test_reasoner_response_accepts_common_shapes() -> None:
    assert ReasonerResponse.model_validate({"ids": [" a ", "b", "a"]}).selected_ids == ["a", "b"]
    assert ReasonerResponse.model_validate({"selected_ids": []}).selected_ids == []
    with pytest.raises(ValidationError):
        ReasonerResponse.model_validate({"answer": "a"})


def test_reasoner_prompt_lists_ranked_candidates_with_ids() -> None:
    system, user = render_reasoner(
        ReasonerContext(query="When is my flight?", candidates=CANDIDATES)
    )
    text = user["content"]
    assert "Query: When is my flight?" in text
    positions = [text.index(f"[{c.id}] {c.text}") for c in CANDIDATES]
    assert positions == sorted(positions)
    assert "Do not invent ids" in system["content"]
    assert "JSON object and nothing else" in system["content"]
    assert '"selected_ids"' in system["content"]


# --------------------------------------------------------------------------- fallback_ids_from_text


def test_ids_in_a_chatty_answer_in_order_of_mention() -> None:
    text = (
        f"Sure! Looking at the query, the most useful memory is {IDS[2]} because it mentions "
        f"the booking. Memory {IDS[0]} gives the date. I'd skip {IDS[1]}... actually no, "
        f"{IDS[2]} is the key one, and {IDS[0]} too."
    )
    assert fallback_ids_from_text(text, IDS) == [IDS[2], IDS[0], IDS[1]]


def test_ids_in_broken_json_and_bullets() -> None:
    text = (
        "```json\n{'selected_ids': ['" + IDS[3].upper() + "', '" + IDS[1] + "',]\n```\n"
        "- also " + str(uuid.uuid4()) + " (not in the list)"
    )
    assert fallback_ids_from_text(text, IDS) == [IDS[3], IDS[1]]


def test_abbreviated_ids_count_only_when_unambiguous() -> None:
    known = [
        "3f2a9c1e-0000-4000-8000-000000000001",
        "3f2a9c1e-9999-4000-8000-000000000002",
        "b7d04e55-1111-4000-8000-000000000003",
    ]
    text = "Use b7d04e55… and 3f2a9c1e (the first one)."
    assert fallback_ids_from_text(text, known) == [known[2]]
    assert fallback_ids_from_text("I pick 3f2a9c1e-9999.", known) == [known[1]]


def test_short_ids_do_not_match_inside_longer_ones() -> None:
    found = fallback_ids_from_text("The answer is mem-10, then mem-2.", ["mem-1", "mem-2"])
    assert found == ["mem-2"]


def test_no_ids_found() -> None:
    assert fallback_ids_from_text("", IDS) == []
    assert fallback_ids_from_text("None of these memories help.", IDS) == []
    assert fallback_ids_from_text(json.dumps({"selected_ids": IDS}), []) == []

"""Relation detection as a model task (streams/prompts/relations.py): its prompt, the
answers it accepts and the direction it falls back to."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.prompts.relations import (
    RELATION_DETECTOR,
    RelationNode,
    RelationResponse,
    render,
    resolved_direction,
)
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message
from tests.support.relation_nodes import DELAY, MISSED, T0, ZH_DELAY, ZH_MISSED, node, pair

# --------------------------------------------------------------------------- response model


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("cause", "CAUSE"), ("Causes", "CAUSE"), ("conditional", "CONDITION"),
     ("related", "RELATE"), ("RELATE_TO", "RELATE"), ("contradiction", "CONFLICT"),
     ("none", "NONE"), ("unrelated", "NONE")],
)
def test_response_accepts_common_spellings(raw: str, expected: str) -> None:
    assert RelationResponse.model_validate({"relation": raw}).relation == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("new_to_old", "new_to_old"), ("NEW -> OLD", "new_to_old"), ("old→new", "old_to_new"),
     ("the OLD memory causes the NEW one", "old_to_new"), ("", None), ("null", None)],
)
def test_response_direction_spellings(raw: str, expected: str | None) -> None:
    answer = RelationResponse.model_validate({"relation": "CAUSE", "direction": raw})
    assert answer.direction == expected


def test_response_rejects_unknown_labels_and_directions() -> None:
    with pytest.raises(ValidationError, match="relation"):
        RelationResponse.model_validate({"relation": "MAYBE"})
    with pytest.raises(ValidationError, match="direction"):
        RelationResponse.model_validate({"relation": "CAUSE", "direction": "sideways"})


def test_direction_is_dropped_for_undirected_labels_and_reason_is_clipped() -> None:
    answer = RelationResponse.model_validate(
        {"relation": "RELATE", "direction": "new_to_old", "reason": "x " * 400}
    )
    assert answer.direction is None and len(answer.reason) <= 300


def test_missing_direction_falls_back_to_time_order() -> None:
    ctx = pair(node("B happened.", hours=5, memory_time=T0), node("A happened.", hours=1))
    answer = RelationResponse(relation="CAUSE")
    # memory_time (the event) wins over updated_at: the new memory's event came first.
    assert resolved_direction(ctx, answer) == "new_to_old"
    assert resolved_direction(pair(node("B", hours=5), node("A", hours=1)), answer) == (
        "old_to_new"
    )
    assert resolved_direction(ctx, RelationResponse(relation="RELATE")) is None


async def test_detector_through_an_openai_compatible_endpoint(
    scripted_openai: ScriptedOpenAI,
) -> None:
    scripted_openai.enqueue(Reply.text(
        '```json\n{"relation": "causes", "direction": "OLD -> NEW", '
        '"reason": "The delay made the user miss the meeting."}\n```'
    ))
    llm = OpenAILLM(scripted_openai.llm_settings())
    answer = await llm.run(RELATION_DETECTOR, pair(MISSED, DELAY))
    await llm.close()
    assert (answer.relation, answer.direction) == ("CAUSE", "old_to_new")
    assert "three hours" in last_user_message(scripted_openai.chat_requests[0])


# --------------------------------------------------------------------------- prompt


def test_prompt_shows_both_memories_and_the_rules() -> None:
    new = node(MISSED.text, key="missed client meeting", tags=["meeting", "berlin"],
               entities=["Berlin"], memory_time=T0 + timedelta(hours=5), session_id="s1")
    old = node(DELAY.text, key="flight delay", tags=["flight"], session_id="s1")
    system, user = render(pair(new, old))
    text = user["content"]
    assert text.index("NEW memory") < text.index(MISSED.text) < text.index("OLD memory")
    assert text.index("OLD memory") < text.index(DELAY.text)
    for expected in ("missed client meeting", "flight delay", "meeting, berlin",
                     "entities: Berlin", "2025-05-02T14:00", "same conversation session"):
        assert expected in text
    rules_text = system["content"]
    assert "adds knowledge that is not explicit in either memory" in rules_text
    assert 'answer NONE' in rules_text and '"new_to_old"' in rules_text
    for label in ("CAUSE", "CONDITION", "RELATE", "CONFLICT", "NONE"):
        assert f'"{label}"' in rules_text
    assert "JSON object and nothing else" in rules_text
    assert text.rstrip().endswith("Answer with the JSON object only.")


def test_prompt_language_follows_the_new_memory() -> None:
    zh = render(pair(ZH_MISSED, DELAY))[0]["content"]
    en = render(pair(MISSED, ZH_DELAY))[0]["content"]
    assert "The NEW memory is in Chinese: write the reason in Chinese" in zh
    assert "The NEW memory is in English" in en
    assert "different conversation sessions" in render(pair(MISSED, DELAY))[1]["content"]


def test_node_from_a_stored_memory_item() -> None:
    item = MemoryItem(
        id="n1", memory="The user's flight was delayed.",
        metadata=MemoryMetadata(user_id="u", cube_id="u", memory_type="LongTermMemory",
                                key="delay", tags=("flight",), entities=("Berlin",),
                                session_id="s9", updated_at=T0, memory_time=T0),
    )
    got = RelationNode.of(item)
    assert (got.text, got.key, got.tags, got.entities, got.session_id) == (
        item.memory, "delay", ["flight"], ["Berlin"], "s9")
    assert got.when == T0

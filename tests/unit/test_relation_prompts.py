"""The optimizer's pair tasks: relation detection and inferred facts, prompts and stand-ins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.relations import rules
from memstream.streams.prompts.inference import (
    INFERENCE,
    InferenceContext,
    InferenceResponse,
    novel_fact,
)
from memstream.streams.prompts.inference import render as render_inference
from memstream.streams.prompts.relations import (
    RELATION_DETECTOR,
    RelationContext,
    RelationNode,
    RelationResponse,
    render,
    resolved_direction,
)
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message

T0 = datetime(2025, 5, 2, 9, 0, tzinfo=UTC)


def node(
    text: str, *, hours: float = 0, tags: list[str] | None = None, **kw: object
) -> RelationNode:
    return RelationNode.model_validate(
        {"text": text, "tags": tags or [], "updated_at": T0 + timedelta(hours=hours), **kw}
    )


def pair(new: RelationNode, old: RelationNode) -> RelationContext:
    return RelationContext(new=new, old=old)


# The trip conversation, as the extraction stage would store it (tags included).
DELAY = node("The user's flight to Berlin was delayed by three hours.",
             tags=["flight", "berlin", "delay"], hours=1)
MISSED = node("The user missed the 2 pm meeting with the client in Berlin because of the "
              "flight delay.", tags=["meeting", "client", "berlin"], hours=2)
BOOKED = node("The user booked a flight to Berlin for the client meeting.",
              tags=["flight", "berlin", "client"], hours=0)
ZH_DELAY = node("用户去柏林的航班延误了三个小时。", tags=["航班", "延误", "柏林"], hours=1)
ZH_MISSED = node("用户因为航班延误错过了在柏林和客户的会议。", tags=["会议", "客户", "柏林"],
                 hours=2)
ZH_BOOKED = node("用户为了和客户开会订了去柏林的航班。", tags=["航班", "客户", "柏林"], hours=0)


# --------------------------------------------------------------------------- rules: CAUSE


def test_the_delay_caused_the_missed_meeting() -> None:
    answer = rules(pair(MISSED, DELAY))
    assert answer.relation == "CAUSE"
    assert answer.direction == "old_to_new"  # the stored delay caused the new missed meeting
    assert "flight delay" in answer.reason


def test_the_cause_is_found_whichever_memory_arrives_first() -> None:
    # The user mentions the missed meeting first and explains the delay later: the cue, not
    # the arrival order, says which is the cause.
    answer = rules(pair(node(DELAY.text, hours=5), MISSED))
    assert (answer.relation, answer.direction) == ("CAUSE", "new_to_old")


def test_a_booking_of_the_same_flight_only_relates() -> None:
    for new, old in [(BOOKED, DELAY), (DELAY, BOOKED), (MISSED, BOOKED), (BOOKED, MISSED)]:
        answer = rules(pair(new, old))
        assert answer.relation == "RELATE", (new.text, old.text)
        assert answer.direction is None


def test_chinese_trip_conversation() -> None:
    answer = rules(pair(ZH_MISSED, ZH_DELAY))
    assert (answer.relation, answer.direction) == ("CAUSE", "old_to_new")
    assert "航班延误" in answer.reason and "旧记忆" in answer.reason
    assert rules(pair(ZH_BOOKED, ZH_DELAY)).relation == "RELATE"
    assert rules(pair(ZH_MISSED, ZH_BOOKED)).relation == "RELATE"


@pytest.mark.parametrize(
    ("effect", "cause", "tags"),
    [
        ("The user missed the meeting after the three-hour flight delay.",
         "The user's flight to Berlin was delayed by three hours.", []),
        ("The user's train to Munich was cancelled.",
         "Heavy snow hit Munich on Friday, which led to the cancellation of the user's train.",
         []),
        ("The user stayed home on Saturday due to the storm in Hamburg.",
         "A storm hit Hamburg on Saturday.", []),
        # A one-word cause ("下大雨") also needs a shared subject: here the city tag.
        ("由于下大雨，用户取消了周六在杭州的徒步。", "周六杭州下大雨。", ["杭州"]),
        ("用户这周没有去跑步。", "用户扭伤了脚踝，所以这周没有去跑步。", []),
    ],
)
def test_causal_cues_in_either_memory(effect: str, cause: str, tags: list[str]) -> None:
    answer = rules(pair(node(effect, hours=3, tags=tags), node(cause, hours=1, tags=tags)))
    assert (answer.relation, answer.direction) == ("CAUSE", "old_to_new")
    flipped = rules(pair(node(cause, hours=3, tags=tags), node(effect, hours=1, tags=tags)))
    assert (flipped.relation, flipped.direction) == ("CAUSE", "new_to_old")


def test_a_causal_cue_about_something_else_is_not_a_cause() -> None:
    tired = node("The user was tired because of the long hike in the Alps.")
    assert rules(pair(tired, DELAY)).relation == "NONE"
    # Both memories give the same cause: they share it, neither caused the other.
    upset = node("The user was upset because of the flight delay.", tags=["berlin"])
    assert rules(pair(upset, MISSED)).relation != "CAUSE"


def test_mutual_causes_fall_back_to_time_order() -> None:
    # Each memory names the other as its cause; the earlier event is taken as the cause.
    a = node("The user skipped lunch because of the deadline stress.", hours=1)
    b = node("The user felt deadline stress because the user skipped lunch.", hours=4)
    assert (rules(pair(b, a)).relation, rules(pair(b, a)).direction) == ("CAUSE", "old_to_new")
    assert rules(pair(a, b)).direction == "new_to_old"


# --------------------------------------------------------------------------- rules: CONDITION


@pytest.mark.parametrize(
    ("conditional", "condition"),
    [
        ("If it rains on Saturday, the user will cancel the hike.",
         "The forecast says it will rain on Saturday."),
        ("The user will cancel the hike if it rains on Saturday.",
         "It is going to rain on Saturday."),
        ("The user can take the job in Munich only if the visa is approved.",
         "The user's visa for Germany was approved."),
        ("只有老板批准，用户才能下周请假。", "老板批准了用户的请假。"),
        ("如果周六天气好，用户就去爬山。", "周六天气很好。"),
    ],
)
def test_conditional_cues(conditional: str, condition: str) -> None:
    answer = rules(pair(node(conditional, hours=2), node(condition, hours=1)))
    assert (answer.relation, answer.direction) == ("CONDITION", "old_to_new")
    flipped = rules(pair(node(condition), node(conditional)))
    assert (flipped.relation, flipped.direction) == ("CONDITION", "new_to_old")


def test_two_memories_with_the_same_condition_are_not_conditions_of_each_other() -> None:
    a = node("If it rains on Saturday, the user will cancel the hike.")
    b = node("If it rains on Saturday, the user will stay at home and read.")
    assert rules(pair(a, b)).relation != "CONDITION"


# --------------------------------------------------------------------------- rules: RELATE / NONE


def test_relate_needs_a_named_entity_or_two_subject_tags() -> None:
    two_tags = rules(pair(node("The user runs every morning.", tags=["running", "fitness"]),
                          node("The user signed up for a marathon.", tags=["running", "fitness"])))
    assert two_tags.relation == "RELATE"
    one_tag = rules(pair(node("The user runs every morning.", tags=["running", "morning"]),
                         node("The user signed up for a marathon.", tags=["running", "race"])))
    assert one_tag.relation == "NONE"
    # Given entities count as well as names found in the text.
    entity = rules(pair(node("The user's manager praised the demo.", entities=["Thomas"]),
                        node("Thomas is moving to the London office.")))
    assert entity.relation == "RELATE" and "thomas" in entity.reason


def test_generic_tags_never_relate() -> None:
    answer = rules(pair(node("The user likes jazz.", tags=["preference", "user", "music"]),
                        node("The user likes sushi.", tags=["preference", "user", "food"])))
    assert answer.relation == "NONE"
    zh = rules(pair(node("用户喜欢爵士乐。", tags=["偏好", "计划", "音乐"]),
                    node("用户喜欢寿司。", tags=["偏好", "计划", "食物"])))
    assert zh.relation == "NONE" and zh.reason.startswith("没有")


def test_rules_never_claim_a_conflict() -> None:
    # Contradictions are the merge stage's; the rules do not label them CONFLICT.
    for new, old in [("The user moved to Lisbon.", "The user lives in Lisbon's suburbs."),
                     ("用户现在有三只猫。", "用户有两只猫。"),
                     ("The user no longer works at Google.", "The user works at Google.")]:
        assert rules(pair(node(new), node(old))).relation != "CONFLICT"


async def test_rules_provider_runs_the_detector() -> None:
    answer = await RulesLLM().run(RELATION_DETECTOR, pair(MISSED, DELAY))
    assert isinstance(answer, RelationResponse) and answer.relation == "CAUSE"


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


# --------------------------------------------------------------------------- inference


def test_inference_context_is_oriented_by_the_detector_answer() -> None:
    ctx = pair(MISSED, DELAY)
    inferred = InferenceContext.from_relation(ctx, rules(ctx))
    assert inferred is not None
    assert (inferred.relation, inferred.source, inferred.target) == ("CAUSE", DELAY, MISSED)
    assert InferenceContext.from_relation(ctx, RelationResponse(relation="RELATE")) is None


async def test_rules_infer_nothing() -> None:
    ctx = InferenceContext(relation="CAUSE", source=DELAY, target=MISSED)
    assert (await RulesLLM().run(INFERENCE, ctx)).fact is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("It can be inferred that the user arrived after 2 pm.",
         "It can be inferred that the user arrived after 2 pm."),
        ("it can be inferred that: the user arrived late",
         "It can be inferred that the user arrived late"),
        ("The user arrived in Berlin after 2 pm.",
         "It can be inferred that the user arrived in Berlin after 2 pm."),
        ("可以推断出，用户的脚踝还没有恢复。", "可以推断用户的脚踝还没有恢复。"),
        ("用户的脚踝还没有恢复。", "可以推断用户的脚踝还没有恢复。"),
        (None, None), ("null", None), ("None.", None), ("无", None), ("  ", None),
        ("It can be inferred that.", None),
    ],
)
def test_inferred_fact_is_phrased_or_none(raw: str | None, expected: str | None) -> None:
    assert InferenceResponse.model_validate({"fact": raw}).fact == expected


def test_a_restated_memory_is_not_a_new_fact() -> None:
    ctx = InferenceContext(relation="CAUSE", source=DELAY, target=MISSED)
    restated = InferenceResponse(fact="It can be inferred that the user's flight to Berlin "
                                      "was delayed.")
    assert novel_fact(ctx, restated) is None
    new = InferenceResponse(fact="It can be inferred that the user arrived in Berlin after 2 pm.")
    assert novel_fact(ctx, new) == new.fact
    assert novel_fact(ctx, InferenceResponse(fact=None)) is None


def test_inference_prompt() -> None:
    ctx = InferenceContext(relation="CONDITION", source=ZH_DELAY, target=ZH_MISSED,
                           reason="条件")
    system, user = render_inference(ctx)
    assert ZH_DELAY.text in user["content"] and ZH_MISSED.text in user["content"]
    assert user["content"].index("SOURCE memory") < user["content"].index("TARGET memory")
    assert "only if, or only when" in system["content"]
    assert '"It can be inferred that"' in system["content"] and "可以推断" in system["content"]
    assert "not already stated in either" in system["content"]
    assert "answer null" in system["content"]
    assert "The pair of memories is in Chinese: write the fact in Chinese" in system["content"]
    assert "JSON object and nothing else" in system["content"]
    cause = render_inference(InferenceContext(relation="CAUSE", source=DELAY, target=MISSED))
    assert "SOURCE caused TARGET" in cause[0]["content"]

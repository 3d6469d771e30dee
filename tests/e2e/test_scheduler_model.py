"""The memory scheduler driven by a model (the scripted OpenAI-compatible server): the
decision, rerank and filter answers are applied, unusable answers fall back, and many
cubes are handled concurrently, each in order. Real broker and stores."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from memstream.topics.events import WorkingMemoryReplacement
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import SCHEDULE_ANSWER, WORKING_MEMORY
from tests.e2e.test_scheduler import (
    DIET,
    TRAVEL,
    ask,
    poll,
    remember,
    replacement_for,
    start_pipeline,
    stop_pipeline,
    working_texts,
)
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message, system_prompt
from tests.support.pipeline import Pipeline, pipeline_settings
from tests.support.topics import read_topic


@pytest_asyncio.fixture(scope="module")
async def model() -> AsyncIterator[ScriptedOpenAI]:
    server = ScriptedOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(scope="module")
async def llm_sched(tmp_path_factory: pytest.TempPathFactory, kafka_broker: str,
                    falkordb_uri: str, model: ScriptedOpenAI) -> AsyncIterator[Pipeline]:
    """The scheduler with the ``openai`` provider pointed at the scripted server."""
    settings = pipeline_settings(
        tmp_path_factory.mktemp("llm-sched"), kafka_broker, falkordb_uri,
        llm={"base_url": model.base_url, "api_key": "test-key", "max_retries": 0,
             "backoff_s": 0.01, "timeout_s": 5},
        memory={"conflict_detection": False},
        worker={"stage_retries": 1},
    )
    p = await start_pipeline(settings, llm_server=model)
    try:
        yield p
    finally:
        await stop_pipeline(p)


KEYWORDS_PROMPT = "You extract search keywords"
DECISION_PROMPT = "You manage the working memory of a personal assistant"
RERANK_PROMPT = "You order memories for a personal assistant"
FILTER_PROMPT = "You clean up a personal assistant's working memory"


def listed(request: dict[str, Any]) -> list[str]:
    """The ``[i] text`` candidates of a rerank or filter prompt, by index."""
    return re.findall(r"^\[\d+\] (.*)$", last_user_message(request), re.MULTILINE)


def latest_query(request: dict[str, Any]) -> str:
    found = re.search(r"^- \(latest\) (.*)$", last_user_message(request), re.MULTILINE)
    assert found is not None
    return found.group(1)


async def test_the_model_decides_reranks_and_filters_and_sees_the_last_answer(
    llm_sched: Pipeline, model: ScriptedOpenAI,
) -> None:
    model.reset()
    model.route(KEYWORDS_PROMPT, {"keywords": ["cook", "tonight"]})

    def decision(request: dict[str, Any]) -> Reply:
        if latest_query(request) == "what should I cook tonight?":
            return Reply.json({"need_retrieval": True, "reason": "needs the diet",
                               "missing_evidence": ["the user's diet", "foods the user likes"]})
        return Reply.json({"need_retrieval": False, "reason": "already known"})

    def rerank(request: dict[str, Any]) -> Reply:  # a "model" that prefers food memories
        texts = listed(request)
        food = [i for i, t in enumerate(texts) if "vegetarian" in t or "tofu" in t]
        return Reply.json({"order": food + [i for i in range(len(texts)) if i not in food]})

    def keep_all_but_the_hotel(request: dict[str, Any]) -> Reply:
        return Reply.json({"keep": [i for i, t in enumerate(listed(request)) if "hotel" not in t]})

    model.route(DECISION_PROMPT, decision)
    model.route(RERANK_PROMPT, rerank)
    model.route(FILTER_PROMPT, keep_all_but_the_hotel)
    await remember(llm_sched, "mdl", [*DIET, *TRAVEL])

    msg, _ = await ask(llm_sched, "mdl", "what should I cook tonight?")
    texts = [i.memory for i in (await replacement_for(llm_sched, msg)).items]
    assert set(texts[:2]) == set(DIET) and texts[2:] == [TRAVEL[0]]  # the hotel filtered out
    assert await working_texts(llm_sched, "mdl") == texts
    decided = [r for r in model.chat_requests if DECISION_PROMPT in system_prompt(r)]
    assert all(t in last_user_message(decided[0]) for t in [*DIET, *TRAVEL])

    _, answered = await ask(llm_sched, "mdl", "Try a spicy tofu stir-fry.", label="answer",
                            spec=SCHEDULE_ANSWER)
    # answers and queries are two topics: Kafka orders neither against the other, so the
    # agent waits for its answer to be applied before the next query (read-your-writes)
    await llm_sched.client.wait_applied(answered)
    follow, token = await ask(llm_sched, "mdl", "and for dessert?")
    await llm_sched.client.wait_applied(token)
    prompt = last_user_message([r for r in model.chat_requests
                                if DECISION_PROMPT in system_prompt(r)][-1])
    assert "The assistant's last answer: Try a spicy tofu stir-fry." in prompt
    assert "what should I cook tonight?" in prompt and "(latest) and for dessert?" in prompt
    events = [e.event_id for e in await read_topic(llm_sched.settings, llm_sched.bootstrap,
                                                    WORKING_MEMORY) if e.cube_id == "mdl"]
    assert derived_event_id("working-memory", follow.event_id) not in events


async def test_unusable_model_answers_fall_back_and_keep_the_order(
    llm_sched: Pipeline, model: ScriptedOpenAI,
) -> None:
    model.reset()
    model.route(KEYWORDS_PROMPT, Reply.http_error(500))
    model.route(DECISION_PROMPT, Reply.text("I think you should retrieve things."))
    model.route(RERANK_PROMPT, {"order": [9, 0]})  # index out of range
    model.route(FILTER_PROMPT, Reply.http_error(503))
    await remember(llm_sched, "flaky", [*DIET, *TRAVEL])
    before = await working_texts(llm_sched, "flaky")

    msg, _ = await ask(llm_sched, "flaky", "what should I cook tonight?")
    event = await replacement_for(llm_sched, msg)
    texts = [i.memory for i in event.items]
    assert sorted(texts) == sorted(before)  # nothing dropped
    # nothing reordered: the candidates stay in the search's ranking
    ranked = [h.item.memory for h in await llm_sched.client.search(
        "flaky", "what should I cook tonight?", top_k=10, memory_type="All")]
    assert texts == [t for t in dict.fromkeys(ranked) if t in texts]
    assert "does not mention" in event.reason  # the rules stand-in decided


async def test_twenty_interleaved_cubes_run_concurrently_each_in_order(
    llm_sched: Pipeline, model: ScriptedOpenAI,
) -> None:
    model.reset()
    think = 0.25
    model.route(KEYWORDS_PROMPT, {"keywords": ["plans"]})
    model.route(DECISION_PROMPT, lambda request: Reply.json(
        {"need_retrieval": True, "missing_evidence": [latest_query(request)], "reason": "r"},
        delay_s=think))
    cubes = [f"many-{i:02d}" for i in range(20)]
    rounds = 3
    for k in range(rounds):  # q1 of every cube, then every q2, then every q3
        for cube in cubes:
            await ask(llm_sched, cube, f"{cube} plans, question {k}")

    async def all_events() -> list[WorkingMemoryReplacement]:
        found = [e for e in await read_topic(llm_sched.settings, llm_sched.bootstrap,
                                             WORKING_MEMORY) if e.cube_id in cubes]
        return found if len(found) == len(cubes) * rounds else []

    events = await poll(all_events, 120, "a replacement for every query")
    for cube in cubes:  # each cube's queries were handled one after another, in order
        asked = tuple(f"{cube} plans, question {k}" for k in range(rounds))
        assert [e.queries for e in events if e.cube_id == cube] == \
            [asked[: k + 1] for k in range(rounds)]
    decisions = [r for r in model.requests
                 if r.path.endswith("/chat/completions") and DECISION_PROMPT in
                 system_prompt(r.body)]
    starts = sorted(r.at for r in decisions)
    overlap = max(sum(1 for t in starts if s <= t < s + think) for s in starts)
    assert overlap >= 5, f"at most {overlap} decisions in flight at once"
    for cube in cubes:
        mine = sorted(r.at for r in decisions if latest_query(r.body).startswith(cube))
        assert all(b - a >= think * 0.9 for a, b in zip(mine, mine[1:], strict=False))

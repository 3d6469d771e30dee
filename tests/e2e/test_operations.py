"""Operating memstream: a worker's metrics endpoint, LLM token budgets per cube, and fine
search degrading while extraction lags — real broker and stores, scripted model."""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from memstream.topics.events import MemoryUpdate, SearchRequest, SearchResult
from memstream.topics.registry import CONVERSATIONS, MEMORY_UPDATES
from memstream.topics.settings import Settings
from tests.fakes.openai_server import Reply, ScriptedOpenAI
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import produce_raw

EXTRACTION_PROMPT = "You keep the long-term memory"
PROMPT_TOKENS, COMPLETION_TOKENS = 30, 10


def _model_memory(request: dict[str, Any]) -> Reply:
    """An extraction answer that says it came from the model (and which message it read)."""
    said = request["messages"][-1]["content"]
    marker = next(w for w in said.split() if w.startswith("item-"))
    return Reply.json({"memories": [{"key": marker, "memory_type": "UserMemory",
                                     "value": f"The model extracted {marker}.",
                                     "tags": ["budget"]}],
                       "summary": "one statement"},
                      prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)


def _settings(tmp: Path, broker: str, graph: str, server: ScriptedOpenAI,
              **overrides: Any) -> Settings:
    """The model only extracts: no merge judge, optimizer or scheduler calls to count."""
    return pipeline_settings(
        tmp, broker, graph,
        llm={"base_url": server.base_url, "api_key": "k", "max_retries": 0, "backoff_s": 0.01,
             "timeout_s": 10},
        worker={"stage_retries": 0},
        memory={"conflict_detection": False},
        reorganize={"enabled": False},
        scheduler={"enabled": False},
        **overrides,
    )


@asynccontextmanager
async def _pipeline(settings: Settings, server: ScriptedOpenAI) -> AsyncIterator[Pipeline]:
    """A worker and client, stopped even when the test fails inside."""
    running = run_pipeline(settings, server)
    try:
        yield await anext(running)
    finally:
        await running.aclose()


def _chunk(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"I told you about item-{n} today, it matters to me."}]


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback test URL
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_endpoint_shows_throughput_lag_dead_letters_and_tokens(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: ScriptedOpenAI,
) -> None:
    server = scripted_openai
    server.route(EXTRACTION_PROMPT, lambda request: _slow(_model_memory(request)))
    server.route("You prepare memory searches", Reply.json({
        "keys": ["stamps"], "tags": [], "goal_type": "retrieval",
        "rephrased_instruction": "Find the user's hobbies.", "internet_search": False,
        "memories": ["Mia collects stamps.", "Mia's hobby is philately."]}))
    server.route("You choose which memories", lambda request: Reply.json({"ids": []}))
    settings = _settings(tmp_path, kafka_broker, falkordb_uri, server,
                         metrics={"sample_interval_s": 0.2},
                         governance={"search_degrade_lag": 0})
    async with _pipeline(settings, server) as pipeline:
        url = pipeline.worker.metrics_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        client = pipeline.client
        # a cube with memories already (no extraction), so a search has something to find
        await client.wait_applied(await client.add_memories("mia", ["Mia collects stamps."]))
        conversations = CONVERSATIONS.name(settings)
        await produce_raw(pipeline.bootstrap, conversations, b"{not json", b"mia")
        tokens = [await client.add_messages("mia", _chunk(n)) for n in range(6)]

        # during ingestion: the backlog shows as lag, and a fine search is degraded to fast
        lag_seen, mode_used = 0.0, None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not lag_seen or mode_used is None):
            samples = await asyncio.to_thread(_scrape, url)
            lag_seen = max(lag_seen, sum(v for (name, labels), v in samples.items()
                                         if name == "memstream_consumer_lag"
                                         and ("topic", conversations) in labels))
            if lag_seen and mode_used is None:
                reply = await client.request(SearchRequest(
                    user_id="mia", cube_id="mia", query="stamps", mode="fine"))
                assert isinstance(reply.result, SearchResult)
                mode_used = reply.result.mode_used
            await asyncio.sleep(0.1)
        assert lag_seen > 0, "no lag was visible while six slow chunks waited"
        assert mode_used == "fast"

        await client.wait_applied(tokens[-1], timeout=120)
        await asyncio.sleep(0.5)  # one more sample of the counters
        samples = await asyncio.to_thread(_scrape, url)
        calls = sum(1 for r in server.chat_requests
                    if EXTRACTION_PROMPT in json.dumps(r["messages"][0]))
        assert calls == 6
        assert _value(samples, "memstream_stage_records_total", stage="extraction") == 7
        assert (_value(samples, "memstream_stage_records_per_second", stage="extraction")
                or 0) > 0
        assert _value(samples, "memstream_dead_letters_total", stage="extraction") == 1
        assert _value(samples, "memstream_llm_tokens_total", stage="extraction", cube="mia",
                      kind="prompt") == calls * PROMPT_TOKENS
        assert _value(samples, "memstream_llm_tokens_total", stage="extraction", cube="mia",
                      kind="completion") == calls * COMPLETION_TOKENS
        assert _value(samples, "memstream_llm_calls_total", stage="extraction", cube="mia",
                      task="extraction", outcome="ok") == calls
        assert (_value(samples, "memstream_stage_handling_seconds_count", stage="extraction")
                or 0) >= 1
        assert _value(samples, "memstream_search_seconds_count", mode="fast") is not None
        assert _value(samples, "memstream_search_degraded_total") == 1
        # once extraction has caught up (lag sampled at 0), fine search is fine again
        while pipeline.deps.ops is not None and pipeline.deps.ops.extraction_lag():
            await asyncio.sleep(0.1)
        reply = await client.request(SearchRequest(user_id="mia", cube_id="mia",
                                                   query="stamps", mode="fine"))
        assert isinstance(reply.result, SearchResult) and reply.result.mode_used == "fine"


def _slow(reply: Reply) -> Reply:
    return Reply(content=reply.content, delay_s=0.4, prompt_tokens=reply.prompt_tokens,
                 completion_tokens=reply.completion_tokens)


async def test_a_cube_over_its_token_budget_falls_back_to_rules_and_says_so(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: ScriptedOpenAI,
) -> None:
    server = scripted_openai
    server.route(EXTRACTION_PROMPT, _model_memory)
    budget = 100
    settings = _settings(tmp_path, kafka_broker, falkordb_uri, server,
                         governance={"cube_token_budgets": {"ivy": budget}})
    async with _pipeline(settings, server) as pipeline:
        client = pipeline.client
        tokens = [await client.add_messages("ivy", _chunk(n)) for n in range(5)]
        # another cube has no budget: never limited
        tokens.append(await client.add_messages("zed", _chunk(9)))
        for token in tokens:
            await client.wait_applied(token, timeout=120)

        per_call = PROMPT_TOKENS + COMPLETION_TOKENS
        asked = [json.dumps(r["messages"]) for r in server.chat_requests]
        ivy_calls = sum(1 for a in asked if "item-9" not in a)
        assert ivy_calls == math.ceil(budget / per_call)  # called until spent, not after
        assert sum(1 for a in asked if "item-9" in a) == 1

        memories = sorted(n.memory for n in await client.get_all("ivy")  # episodes left out
                          if n.metadata.memory_type in ("UserMemory", "LongTermMemory"))
        by_model = [m for m in memories if m.startswith("The model extracted")]
        assert by_model == [f"The model extracted item-{n}." for n in range(ivy_calls)]
        # the later chunks went through the rules stand-in: the user's words, verbatim
        for n in range(ivy_calls, 5):
            assert any(f"item-{n}" in m and "The model" not in m for m in memories), memories

        notices = [u for u in await client.history(MEMORY_UPDATES, cube_id="ivy")
                   if isinstance(u, MemoryUpdate) and u.action == "budget_exceeded"]
        assert len(notices) == 1 and notices[0].stage == "extraction"
        assert f"{ivy_calls * per_call} of {budget} tokens" in notices[0].reason
        assert "rules stand-in" in notices[0].reason
        assert pipeline.worker.metrics is not None
        assert pipeline.worker.metrics.spent.labels("ivy")._value.get() == ivy_calls * per_call


async def test_over_budget_with_defer_dead_letters_the_event_naming_the_cube(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: ScriptedOpenAI,
) -> None:
    server = scripted_openai
    server.route(EXTRACTION_PROMPT, _model_memory)
    settings = _settings(tmp_path, kafka_broker, falkordb_uri, server,
                         governance={"token_budget": 1, "over_budget": "defer"})
    async with _pipeline(settings, server) as pipeline:
        client = pipeline.client
        first = await client.add_messages("eve", _chunk(0))
        second = await client.add_messages("eve", _chunk(1))
        await client.wait_applied(second, timeout=120)
        # only item-0 was ever asked (its batch was retried record by record: asked twice,
        # counted once); item-1 never reached the model
        asked = [json.dumps(r["messages"]) for r in server.chat_requests]
        assert asked and all("item-0" in a for a in asked)
        assert await client.command_failure(first) is None
        failure = await client.command_failure(second) or ""
        assert "cube 'eve' spent 40 of its 1 LLM tokens" in failure and "deferred" in failure
        notices = [u.reason for u in await client.history(MEMORY_UPDATES, cube_id="eve")
                   if isinstance(u, MemoryUpdate) and u.action == "budget_exceeded"]
        assert len(notices) == 1 and "defers its events" in notices[0]

"""What ingestion asks a model, counted by the model server (issue #30): one chunk costs one
extraction, one merge review and one organize call, nothing is asked twice when the chunk
comes again, and a 429's Retry-After holds the worker back — real broker, stores, embedder
and worker; the model is the scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from memstream.cli.worker_metrics import fetch, per_turn_line
from memstream.kafka.admin import worker_lag
from memstream.topics.settings import Settings
from tests.fakes.openai_server import Reply, ScriptedOpenAI, system_prompt
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

# The tasks by a phrase of their system prompts (streams/prompts/*).
TASKS = {
    "Below is a stretch of conversation": "extraction",
    "New memories were just extracted": "memory.review",
    "New memories were just stored": "reorganize.organize",
    "Several clusters follow": "reorganize.cluster_summaries",
}
FIRST = [("Mia", "I adopted a grey cat named Pixel last spring."),
         ("Mia", "I run five kilometres along the river every Sunday morning.")]
SECOND = [("Mia", "Pixel, my grey cat, turned one year old this week."),
          ("Mia", "Every Sunday morning I still run my five kilometres by the river.")]


def task_of(request: dict[str, Any]) -> str:
    system = system_prompt(request)
    return next((task for phrase, task in TASKS.items() if phrase in system), "other")


def extraction(request: dict[str, Any]) -> Reply:
    """One memory per line the user said, in the model's words."""
    said = [line.split(" user: ", 1)[1] for line in
            request["messages"][-1]["content"].splitlines() if " user: " in line]
    memories = [{"value": "The user said: " + text, "memory_type": "LongTermMemory",
                 "tags": ["pixel" if "Pixel" in text else "running", "mia"]} for text in said]
    return Reply.json({"memories": memories, "summary": "Mia's cat and running"})


def script(server: ScriptedOpenAI) -> None:
    server.route("Below is a stretch of conversation", extraction)
    server.route("New memories were just extracted", {"decisions": []})
    server.route("New memories were just stored", lambda request: {"links": [
        {"pair": 0, "relation": "RELATE", "reason": "the same cat or the same run"}],
        "concepts": []})
    server.route("Several clusters follow", {"summaries": []})


@asynccontextmanager
async def pipeline(tmp: Path, broker: str, graph: str, server: ScriptedOpenAI,
                   **llm: Any) -> AsyncIterator[Pipeline]:
    settings: Settings = pipeline_settings(
        tmp, broker, graph,
        llm={"base_url": server.base_url, "api_key": "k", "max_retries": 2, "backoff_s": 0.01,
             "timeout_s": 20, **llm},
        reorganize={"optimize_interval_s": 10**6},  # one structure run, at the first fact
        scheduler={"enabled": False})
    running = run_pipeline(settings, server)
    try:
        yield await anext(running)
    finally:
        await running.aclose()


async def caught_up(p: Pipeline, timeout_s: float = 120) -> None:
    """Until every stage (optimizer included) has handled all its input."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lags = await worker_lag(p.settings, p.bootstrap)
        if all(v == 0 for parts in lags.values() for v in parts.values()):
            return
        await asyncio.sleep(0.3)
    raise AssertionError("the worker did not catch up")


async def send(p: Pipeline, turns: list[tuple[str, str]], session: str) -> None:
    # fixed ids and times: sent again, the chunk is the same input (as a redelivery is)
    messages = [{"role": "user", "name": who, "content": text, "id": f"{session}-{n}",
                 "timestamp": f"2026-11-0{n + 1}T10:00:00+00:00"}
                for n, (who, text) in enumerate(turns)]
    token = await p.client.add_messages("mia", messages, session_id=session)
    await p.client.wait_applied(token, timeout=120)
    await caught_up(p)


async def test_one_chunk_costs_one_call_per_step_and_a_repeat_costs_none(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: ScriptedOpenAI,
) -> None:
    server = scripted_openai
    script(server)
    async with pipeline(tmp_path, kafka_broker, falkordb_uri, server) as p:
        await send(p, FIRST, "s1")
        first = Counter(task_of(r) for r in server.chat_requests)
        assert first["extraction"] == 1 and first["other"] == 0, first
        seen = len(server.chat_requests)

        await send(p, SECOND, "s2")  # similar facts: merge candidates and relation candidates
        asked = Counter(task_of(r) for r in server.chat_requests[seen:])
        assert asked == {"extraction": 1, "memory.review": 1, "reorganize.organize": 1}, asked
        review = next(r for r in server.chat_requests[seen:]
                      if task_of(r) == "memory.review")["messages"][-1]["content"]
        assert review.count("NEW memory") == 2  # both facts of the chunk in the one call
        links = [e for e in (await p.deps.query.export_cube("mia")).edges
                 if e.type == "RELATE_TO"]
        assert links  # the organize answer was applied

        seen = len(server.chat_requests)
        await send(p, SECOND, "s2")  # the same chunk again: every answer is on record
        assert server.chat_requests[seen:] == []

        # what `memstream status` shows: calls and tokens per turn, from the worker's metrics
        assert p.worker.metrics_url is not None
        summary = await fetch(p.worker.metrics_url)
        assert summary.turns == 6 and summary.llm_calls == seen
        assert summary.calls_by_task["memory.review"] == 1
        line = per_turn_line(summary)
        assert f"{seen / 6:.2f} calls" in line and "reorganize.organize 0.17" in line, line


async def test_a_429_with_retry_after_holds_the_worker_back(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: ScriptedOpenAI,
) -> None:
    server = scripted_openai
    server.enqueue(Reply.http_error(429, "slow down", headers=(("Retry-After", "2"),)))
    script(server)
    async with pipeline(tmp_path, kafka_broker, falkordb_uri, server) as p:
        await send(p, FIRST, "s1")
    chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    refused, retried = chats[0], chats[1]
    assert task_of(refused.body) == task_of(retried.body) == "extraction"
    assert retried.at - refused.at >= 1.9  # the server's 2 s, not the 0.01 s backoff
    assert len(chats) >= 2 and not server.unmatched

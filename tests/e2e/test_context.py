"""``context()``: the search's hits as one block for a prompt — through the real pipeline
(broker, FalkorDB, Milvus Lite, rules, local e5), from the client and the command line."""

from __future__ import annotations

import json
import re

from memstream.topics.context import estimate_tokens, hits_for, once_dated
from memstream.topics.events import ScoredMemory
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline

CUBE = "caroline"
# (session, time, speaker, what was said): Caroline's cube, Melanie the other speaker
TURNS = [
    ("s1", "2023-05-08T13:56:00+00:00", "Caroline",
     "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("s1", "2023-05-08T13:57:00+00:00", "Melanie", "Wow, that's great! What happened there?"),
    ("s1", "2023-05-08T13:58:00+00:00", "Caroline",
     "The stories of the others were so inspiring. I want to become a counselor."),
    ("s1", "2023-05-08T13:59:00+00:00", "Melanie", "I painted a lake at sunrise last week."),
    ("s1", "2023-05-08T14:00:00+00:00", "Caroline", "My cat Luna sleeps on my desk all day."),
    ("s2", "2023-07-02T09:00:00+00:00", "Caroline", "I started a pottery class on Mondays."),
    ("s2", "2023-07-02T09:01:00+00:00", "Melanie", "How do you like the pottery class?"),
    ("s2", "2023-07-02T09:02:00+00:00", "Caroline", "我喜欢喝绿茶，每天早上在公园里跑步五公里。"),
]
QUESTIONS = ["What did Caroline do at the support group?", "What does Caroline want to become?",
             "What did Melanie paint?", "她每天早上做什么？", "Which class did Caroline start?"]


async def _conversation(p: Pipeline) -> None:
    token = None
    for session in ("s1", "s2"):
        messages = [{"role": "user" if who == "Caroline" else "assistant", "name": who,
                     "content": text, "timestamp": at}
                    for s, at, who, text in TURNS if s == session]
        token = await p.client.add_messages(CUBE, messages, session_id=session)
    assert token is not None
    await p.client.wait_applied(token, timeout=120)


def bench_cost(hit: ScoredMemory) -> int:
    """What bench/retrieval_quality.py's B2000 counts for a hit (``cited``)."""
    if hit.excerpt is None:
        return len(hit.item.memory)
    extra = 0 if hit.item.metadata.memory_type == "EpisodicMemory" else len(hit.item.memory) + 1
    return len(hit.excerpt) + extra


def bench_takes(hits: list[ScoredMemory], budget: int) -> int:
    """How many hits B2000 takes: in rank order while they fit, up to the first that does not."""
    used = taken = 0
    for hit in hits:
        if used + bench_cost(hit) > budget:
            break
        used, taken = used + bench_cost(hit), taken + 1
    return taken


async def test_the_block_holds_the_search_hits_in_order_dated_and_named(pipeline: Pipeline) -> None:
    p = pipeline
    await _conversation(p)
    for question in QUESTIONS:
        hits = await p.client.search(CUBE, question, top_k=hits_for(2000))
        block = await p.client.context(CUBE, question, 2000)
        assert hits and len(block.text) <= 2000
        # the search's hits, in its order, as many as fit: at least those B2000 credits
        assert block.ids == tuple(h.item.id for h in hits[:len(block.entries)])
        assert len(block.entries) >= bench_takes(hits, 2000), question
        assert block.left_out == len(hits) - len(block.entries)
        for entry, hit in zip(block.entries, hits, strict=False):
            assert entry.text.startswith(f"#{hit.item.id[:8]}")
            if hit.excerpt is not None:
                # the turns as said, with times and names (each day once)
                assert "\n".join(once_dated(hit.excerpt.split("\n"))) in entry.text
                assert entry.message_ids == hit.excerpt_ids
            assert entry.folded_ids == hit.folded_ids
    block = await p.client.context(CUBE, QUESTIONS[0], 2000)
    assert "[2023-05-08 13:56] Caroline: I went to a LGBTQ support group" in block.text
    assert "[13:57] Melanie: Wow" in block.text
    # the statement the turn holds is not written again beside it
    assert block.text.count("support group yesterday") == 1
    # a small budget: fewer hits, still within it, saying how many did not fit
    small = await p.client.context(CUBE, QUESTIONS[0], 300)
    assert len(small.text) <= 300 and small.entries
    assert small.text.endswith(f"({small.left_out} more memories did not fit)")
    tokens = await p.client.context(CUBE, QUESTIONS[3], 120, unit="tokens")
    assert tokens.used == estimate_tokens(tokens.text) <= 120
    assert "绿茶" in tokens.text


async def test_a_memory_that_stopped_holding_says_until_when(pipeline: Pipeline) -> None:
    p = pipeline
    for said in ("I live in Berlin.", "I moved to Munich."):
        await p.client.wait_applied(await p.client.add_memories("mover", [said]), timeout=60)
    block = await p.client.context("mover", "where did I live before?", 2000)
    berlin = next(e for e in block.entries if "Berlin" in e.text)
    munich = next(e for e in block.entries if "Munich" in e.text)
    assert re.match(rf"#{berlin.id[:8]} (\d{{4}}-\d\d-\d\d, )?held until \d{{4}}-\d\d-\d\d "
                    rf"\(replaced by #{munich.id[:8]}\): I live in Berlin\.$", berlin.text), \
        berlin.text
    assert "held until" not in munich.text


async def test_the_command_line_prints_the_block(pipeline: Pipeline) -> None:
    p = pipeline
    await _conversation(p)
    env = pipeline_env(p)
    question = QUESTIONS[1]
    printed = await run_cli(env, "context", question, "--user", CUBE, "--budget", "600")
    assert printed.code == 0, printed.text
    block = await p.client.context(CUBE, question, 600)
    assert printed.out == block.text + "\n"  # as rendered: no markup eaten, nothing wrapped
    assert "[2023-05-08" in printed.out and "Caroline:" in printed.out
    as_json = json.loads((await run_cli(env, "context", question, "--user", CUBE, "--tokens",
                                        "80", "--json")).out)
    assert as_json["unit"] == "tokens" and as_json["used"] <= 80
    assert as_json["ids"] == [e["id"] for e in as_json["entries"]] and as_json["ids"]
    tiny = await run_cli(env, "context", question, "--user", CUBE, "--budget", "10")
    assert tiny.code == 0 and tiny.out == "" and "nothing fits in 10 characters" in tiny.err
    unknown = await run_cli(env, "context", question, "--user", "nobody")
    assert unknown.code == 1 and "has no memories" in unknown.err

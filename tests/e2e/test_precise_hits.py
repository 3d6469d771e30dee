"""A hit returns what answers: the stated fact first, its episode as context, scores that
threshold — through the real pipeline (broker, FalkorDB, Milvus Lite, rules, local e5)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from memstream.topics.events import ScoredMemory
from tests.support.pipeline import Pipeline

# (what the user said, a direct question about it), English then Chinese.
FACTS: list[tuple[str, str]] = [
    ("I'm allergic to shellfish.", "what can't I eat?"),
    ("My sister Emma lives in Toronto.", "Where does my sister live?"),
    ("I drive a blue Honda Civic.", "What car do I drive?"),
    ("I work as a pharmacist at a small clinic.", "What is my job?"),
    ("My dog is a beagle called Biscuit.", "What is my dog's name?"),
    ("I drink green tea every morning.", "What do I drink in the morning?"),
    ("I usually travel light, with one backpack.", "How do I pack for trips?"),
    ("I see my dentist every six months.", "How often do I go to the dentist?"),
    ("I play the cello in a community orchestra.", "Which instrument do I play?"),
    ("My favourite book is One Hundred Years of Solitude.", "What is my favourite novel?"),
    ("I was born in Porto in 1988.", "Where was I born?"),
    ("I run ten kilometres every Sunday.", "How far do I run on weekends?"),
    ("My son Leo is learning to swim.", "What is my son learning?"),
    ("I am saving money to buy a sailboat.", "What am I saving for?"),
    ("I can't stand horror movies.", "Which films do I dislike?"),
    ("我对花生过敏。", "我对什么过敏？"),
    ("我女儿在上海读大学。", "我女儿在哪里上大学？"),
    ("我每天骑自行车上班。", "我怎么去上班？"),
    ("我养了一只叫小白的猫。", "我的猫叫什么名字？"),
    ("我最喜欢吃四川火锅。", "我最喜欢什么菜？"),
    ("我在一家银行当会计。", "我的工作是什么？"),
    ("我每周六下午去游泳。", "我周末做什么运动？"),
    ("我的生日是十月三号。", "我的生日是哪天？"),
    ("我正在学习弹钢琴。", "我在学什么乐器？"),
    ("我爸爸住在杭州。", "我爸爸住在哪里？"),
    ("我不喝咖啡，只喝绿茶。", "我喝咖啡吗？"),
    ("我明年想去日本旅行。", "我打算去哪个国家旅游？"),
    ("我家有三口人。", "我家有几口人？"),
    ("我害怕坐飞机。", "我害怕什么？"),
    ("我的车是一辆白色的丰田。", "我开什么车？"),
]
CUBE = "facts"


def _said(hit: ScoredMemory) -> str:
    """The hit's memory as the user said it (rules adds a resolved date in brackets)."""
    return re.sub(r"\[\d{4}[^\]]*\]", "", hit.item.memory)


async def _add(pipeline: Pipeline) -> None:
    """The facts as a user says them, three to a chat chunk (so each has an episode)."""
    token = None
    for i in range(0, len(FACTS), 3):
        token = await pipeline.client.add_messages(
            CUBE, [{"role": "user", "content": text} for text, _ in FACTS[i:i + 3]],
            session_id=f"s{i // 3}")
    assert token is not None
    await pipeline.client.wait_applied(token, timeout=180)


@pytest.mark.timeout(600)
async def test_a_direct_question_gets_its_fact_first_with_the_episode_as_context(
    pipeline: Pipeline,
) -> None:
    await _add(pipeline)
    first: dict[str, ScoredMemory] = {}
    for text, question in FACTS:
        hits = await pipeline.client.search(CUBE, question, top_k=5)
        assert hits, question
        first[text] = hits[0]
        # no rival hit for the same turn: a statement and its episode count once
        shown = [h.excerpt or h.item.memory for h in hits]
        assert sum(text in s for s in shown) == 1, (question, shown)
    right = [t for t, hit in first.items() if _said(hit) == t]
    wrong = {q: first[t].item.memory for t, q in FACTS if t not in right}
    print(f"{len(right)}/{len(FACTS)} first; missed: {wrong}")
    assert len(right) >= 29, wrong
    for text in ("I'm allergic to shellfish.", "我对花生过敏。"):
        hit = first[text]
        assert hit.item.metadata.memory_type != "EpisodicMemory"  # the fact, not the chunk
        assert hit.episode_id is not None and hit.excerpt is not None and text in hit.excerpt
        assert 0.0 < hit.score <= 1.0


@pytest.mark.timeout(600)
async def test_min_score_leaves_out_what_scores_below_it(pipeline: Pipeline) -> None:
    await _add(pipeline)
    every = await pipeline.client.search(CUBE, "Where does my sister live?", top_k=10)
    scores = [h.score for h in every]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert scores[0] > scores[-1]  # the score separates, it is not 1 for everything
    cut = (scores[0] + scores[-1]) / 2
    kept = await pipeline.client.search(CUBE, "Where does my sister live?", top_k=10,
                                        min_score=cut)
    assert [h.score for h in kept] == [s for s in scores if s >= cut]
    assert kept[0].item.memory == "My sister Emma lives in Toronto."
    top = await pipeline.client.search(CUBE, "Where does my sister live?", min_score=1.0)
    assert all(h.score >= 1.0 for h in top)
    with pytest.raises(ValidationError, match="min_score"):
        await pipeline.client.search(CUBE, "anything", min_score=1.5)

"""Rules mode stores what the user said: searched memories read exactly as written — real
broker and stores, through the client."""

from __future__ import annotations

from tests.e2e.test_hybrid_search import chat
from tests.support.pipeline import Pipeline

SAID = [
    ("I no longer eat meat.", "Do I eat meat?", "I no longer eat meat."),
    ("I hate waking up early myself.", "waking up early",
     "I hate waking up early myself."),
    ("My wife and I watch movies together; we love horror films.", "What films do we like?",
     "My wife and I watch movies together; we love horror films."),
    ("I'm moving to Lisbon next month.", "When am I moving to Lisbon?",
     "I'm moving to Lisbon next month [2023-06]."),
    ("我明天去北京出差。", "我什么时候去北京出差？", "我明天[2023-05-09]去北京出差。"),
    ("私は毎朝コーヒーを飲みます。", "毎朝コーヒー", "私は毎朝コーヒーを飲みます。"),
]


async def test_what_the_user_said_comes_back_from_search_as_written(pipeline: Pipeline) -> None:
    client = pipeline.client
    # one chunk per sentence, said on 2023-05-08 (chat() dates its turns from then)
    tokens = [await client.add_messages("verbatim", chat(("user", None, said)),
                                        session_id=f"s{n}")
              for n, (said, _, _) in enumerate(SAID)]
    for token in tokens:
        await client.wait_applied(token, timeout=60)
    for _, query, stored in SAID:
        found = await client.search("verbatim", query, top_k=5)
        statements = [s.item.memory for s in found
                      if s.item.metadata.memory_type != "EpisodicMemory"]
        assert stored in statements, (query, statements)
    everything = await client.get_all("verbatim", memory_type="LongTermMemory") + \
        await client.get_all("verbatim", memory_type="UserMemory")
    assert sorted(m.memory for m in everything) == sorted(stored for _, _, stored in SAID)

"""MemstreamStore against a real pipeline, checked against what LangGraph's ``BaseStore``
documents (the langgraph packages ship no store conformance suite: langgraph-checkpoint-
conformance covers checkpointers only), and a LangGraph graph that remembers across threads.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
import pytest_asyncio
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from memstream.agents.langgraph_store import MemstreamStore, StoreWriteFailed, open_store
from memstream.topics.context import hits_for
from memstream.topics.events import FreezeNodes
from tests.support.cli import pipeline_env
from tests.support.pipeline import Pipeline

DOCS = Path(__file__).parents[2] / "docs" / "agents.md"


@pytest_asyncio.fixture
async def store(pipeline: Pipeline) -> AsyncIterator[MemstreamStore]:
    made = MemstreamStore(pipeline.client, "app")
    yield made
    await made.close()


async def test_put_get_update_delete(store: MemstreamStore, pipeline: Pipeline) -> None:
    ns = ("users", "alice", "prefs")
    assert await store.aget(ns, "food") is None  # nothing yet, not even the cube
    await store.aput(ns, "food", {"text": "Alice loves spicy Thai food.", "stars": 5})
    item = await store.aget(ns, "food")
    assert item is not None
    assert (item.namespace, item.key) == (ns, "food")
    assert item.value == {"text": "Alice loves spicy Thai food.", "stars": 5}
    assert item.created_at.tzinfo is not None and item.updated_at >= item.created_at
    assert await store.aget(ns, "drink") is None
    assert await store.aget(("users", "bob", "prefs"), "food") is None  # namespaces apart

    # the item is a memstream memory of the namespace's cube, searchable like any other
    node = (await pipeline.client.get("app", [store.node_id(ns, "food")],
                                      cube_id="langgraph.users.alice.prefs"))[0]
    assert node.memory == "Alice loves spicy Thai food." and node.metadata.key == "food"

    await store.aput(ns, "food", {"text": "Alice now avoids spicy food.", "stars": 2})
    updated = await store.aget(ns, "food")
    assert updated is not None and updated.value["stars"] == 2
    assert updated.created_at == item.created_at and updated.updated_at > item.updated_at
    changes = await pipeline.client.memory_history(store.node_id(ns, "food"),
                                                   "langgraph.users.alice.prefs")
    assert [c.update.action for c in changes] == ["added", "updated"]

    await store.aput(ns, "food", {"text": "Alice now avoids spicy food.", "stars": 2})
    again = await store.aget(ns, "food")
    assert again is not None and again.updated_at == updated.updated_at  # a same put: no-op

    await store.adelete(ns, "food")
    assert await store.aget(ns, "food") is None
    await store.adelete(ns, "food")  # deleting what is gone is no error
    await store.aput(ns, "food", {"text": "Alice eats anything."})
    back = await store.aget(ns, "food")
    assert back is not None and back.value == {"text": "Alice eats anything."}


async def test_a_write_memstream_refuses_fails_loudly(store: MemstreamStore,
                                                       pipeline: Pipeline) -> None:
    ns = ("held",)
    await store.aput(ns, "contract", {"text": "The contract ends in May 2027."})
    await pipeline.client.wait_applied(await pipeline.client.command(FreezeNodes(
        user_id="app", cube_id=store.cube_of(ns), node_ids=(store.node_id(ns, "contract"),),
        reason="legal hold")), timeout=60)
    with pytest.raises(StoreWriteFailed, match="put of 'contract'.*frozen"):
        await store.aput(ns, "contract", {"text": "The contract ends in June 2027."})
    with pytest.raises(StoreWriteFailed, match="delete of 'contract'.*frozen"):
        await store.adelete(ns, "contract")
    item = await store.aget(ns, "contract")
    assert item is not None and item.value == {"text": "The contract ends in May 2027."}


async def test_search_filters_semantic_query_prefix_and_paging(store: MemstreamStore,
                                                              pipeline: Pipeline) -> None:
    alice, bob = ("mem", "alice"), ("mem", "bob")
    await store.abatch([
        PutOp(alice, "a1", {"text": "Alice is allergic to peanuts.", "kind": "health",
                            "level": 3, "meta": {"source": "chat"}}),
        PutOp(alice, "a2", {"text": "Alice plays the cello on weekends.", "kind": "hobby",
                            "level": 1, "meta": {"source": "form"}}),
        PutOp(alice, "a3", {"text": "Alice works as a nurse in Lyon.", "kind": "work",
                            "level": 2, "meta": {"source": "chat"}}),
        PutOp(bob, "b1", {"text": "Bob is allergic to cats.", "kind": "health", "level": 5}),
    ])
    hits = await store.asearch(("mem", "alice"), query="what is she allergic to?", limit=2)
    assert [h.key for h in hits][0] == "a1" and len(hits) == 2
    assert all(h.namespace == alice for h in hits)
    assert hits[0].score is not None and hits[0].score >= (hits[1].score or 0)

    everyone = await store.asearch(("mem",), query="allergic", filter={"kind": "health"})
    assert {(h.namespace, h.key) for h in everyone} == {(alice, "a1"), (bob, "b1")}

    assert {h.key for h in await store.asearch(("mem",), filter={"level": {"$gt": 2}})} == {
        "a1", "b1"}
    assert {h.key for h in await store.asearch(alice, filter={"kind": {"$ne": "health"}})} \
        == {"a2", "a3"}
    assert {h.key for h in await store.asearch(alice, filter={"meta": {"source": "chat"}})} \
        == {"a1", "a3"}
    assert {h.key for h in await store.asearch(alice, filter={"level": {"$gte": 1,
                                                                          "$lte": 2}})} \
        == {"a2", "a3"}
    assert await store.asearch(alice, filter={"kind": "none"}) == []

    listed = await store.asearch(alice)  # no query: newest first, no scores
    assert [h.key for h in listed] == ["a3", "a2", "a1"] and listed[0].score is None
    page = await store.asearch(alice, limit=1, offset=1)
    assert [h.key for h in page] == ["a2"]
    with pytest.raises(ValueError, match="unsupported filter operator"):
        await store.asearch(alice, filter={"level": {"$near": 1}})

    # memories of the cube the store did not write (e.g. the optimizer's) are not items
    await pipeline.client.wait_applied(await pipeline.client.add_memories(
        "app", ["Alice is allergic to shellfish."], cube_id=store.cube_of(alice)), timeout=60)
    assert {h.key for h in await store.asearch(alice, query="allergic")} <= {"a1", "a2", "a3"}
    assert len(await store.asearch(alice)) == 3


async def test_a_search_over_namespaces_ranks_them_on_one_scale(store: MemstreamStore) -> None:
    """Issue #41: each namespace is a cube that memstream scores on its own scale, where the
    one item of a namespace scores 1.0 whatever the query; across namespaces the ranking
    follows relevance, and a single namespace keeps memstream's own scores."""
    people = {("people", "alice"): {"diet": "Alice is vegetarian."},
              ("people", "bob"): {"job": "Bob repairs bicycles in Ghent."},
              ("people", "carol"): {"home": "Carol lives in Oslo.",
                                    "pet": "Carol has a grey cat called Mist.",
                                    "sport": "Carol goes cross-country skiing every winter."}}
    await store.abatch([PutOp(ns, key, {"text": text}) for ns, items in people.items()
                        for key, text in items.items()])
    alone = await store.asearch(("people", "alice"), query="Oslo")
    assert [(h.key, h.score) for h in alone] == [("diet", 1.0)]  # memstream's own score

    hits = await store.asearch(("people",), query="Oslo")
    assert [h.key for h in hits][0] == "home", [(h.key, h.score) for h in hits]
    scores = {h.key: h.score or 0.0 for h in hits}
    assert scores["home"] == pytest.approx(1.0)
    assert scores["diet"] < 0.7 and scores["job"] < 0.7, scores  # no longer 1.0 each
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    who_bikes = await store.asearch(("people",), query="who fixes bikes?", limit=1)
    assert [(h.namespace, h.key) for h in who_bikes] == [(("people", "bob"), "job")]


async def test_context_is_the_search_as_one_block_for_a_prompt(store: MemstreamStore) -> None:
    people = {("people", "alice"): {"diet": "Alice is vegetarian."},
              ("people", "carol"): {"home": "Carol lives in Oslo.",
                                    "pet": "Carol has a grey cat called Mist."}}
    await store.abatch([PutOp(ns, key, {"text": text}) for ns, items in people.items()
                        for key, text in items.items()])
    hits = await store.asearch(("people",), query="Oslo", limit=hits_for(300))
    block = await store.acontext(("people",), "Oslo", 300)
    assert block.ids == tuple(store.node_id(h.namespace, h.key) for h in hits)
    home = store.node_id(("people", "carol"), "home")
    assert block.text.split("\n")[0] == f"#{home[:8]}: Carol lives in Oslo."
    assert len(block.text) <= 300 and block.left_out == 0
    small = await store.acontext(("people",), "Oslo", 70)
    assert len(small.text) <= 70 and small.ids == (home,)
    assert small.text.endswith("(2 more memories did not fit)")
    in_tokens = await store.acontext(("people", "alice"), "what does Alice eat?", 30, "tokens")
    assert in_tokens.used <= 30 and "Alice is vegetarian." in in_tokens.text
    assert (await asyncio.to_thread(store.context, ("people",), "Oslo", 300)).text == block.text
    with pytest.raises(RuntimeError, match="use the async methods"):
        store.context(("people",), "Oslo")


async def test_list_namespaces(store: MemstreamStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "x"), ("z", "b", "v1"),
               ("z", "c", "v1")]:
        await store.aput(ns, "k", {"text": f"an item in {'/'.join(ns)}"})
    assert await store.alist_namespaces() == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "x"),
                                              ("z", "b", "v1"), ("z", "c", "v1")]
    assert await store.alist_namespaces(prefix=("a", "b")) == [("a", "b", "c"),
                                                               ("a", "b", "d", "e")]
    assert await store.alist_namespaces(suffix=("v1",)) == [("z", "b", "v1"), ("z", "c", "v1")]
    assert await store.alist_namespaces(prefix=("*", "b")) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("z", "b", "v1")]
    assert await store.alist_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("z", "b"),
                                                         ("z", "c")]
    assert await store.alist_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "x")]
    # a store with another prefix sees none of them
    other = MemstreamStore(store.client, "app", prefix="other")
    assert await other.alist_namespaces() == []


async def test_batch_runs_ops_in_order_and_refuses_what_base_store_refuses(
        store: MemstreamStore) -> None:
    ns = ("batch",)
    results = await store.abatch([
        PutOp(ns, "k", {"text": "first"}), PutOp(ns, "k", {"text": "second"}),
        GetOp(ns, "k"), SearchOp(ns), ListNamespacesOp(
            match_conditions=(MatchCondition("prefix", ("batch",)),)),
        PutOp(ns, "k", None), GetOp(ns, "k"),
    ])
    assert results[0] is None and results[1] is None
    got = results[2]
    assert got is not None and got.value == {"text": "second"}  # type: ignore[union-attr]
    assert [i.key for i in results[3]] == ["k"]  # type: ignore[union-attr]
    assert results[4] == [("batch",)] and results[5] is None and results[6] is None

    with pytest.raises(InvalidNamespaceError):
        await store.aput(("bad.label",), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([GetOp(("a.b",), "k")])
    with pytest.raises(NotImplementedError, match="TTL"):
        await store.aput(ns, "k", {"text": "x"}, ttl=5)


async def test_sync_calls_from_another_thread_and_refused_on_the_loop(
        store: MemstreamStore) -> None:
    ns = ("sync", "t")

    def work() -> tuple[Any, list[Any]]:
        store.put(ns, "k", {"text": "Written from a worker thread."})
        return store.get(ns, "k"), store.search(ns, query="worker thread")

    item, hits = await asyncio.to_thread(work)
    assert item.value == {"text": "Written from a worker thread."}
    assert [h.key for h in hits] == ["k"]
    with pytest.raises(RuntimeError, match="use the async methods"):
        store.get(ns, "k")


class Chat(TypedDict):
    user_id: str
    message: str
    recalled: list[str]


def memory_key(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def remembering_graph(sync: bool = False) -> StateGraph[Chat]:
    """Keeps what the user says under ("memories", user) and recalls it for each message."""

    def wanted(state: Chat) -> str | None:
        message = state["message"]
        return message.removeprefix("Remember: ") if message.startswith("Remember: ") else None

    async def arecall(state: Chat, *, store: BaseStore) -> dict[str, Any]:
        hits = await store.asearch(("memories", state["user_id"]), query=state["message"],
                                   limit=3)
        return {"recalled": [h.value["text"] for h in hits]}

    async def aremember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
        if (text := wanted(state)) is not None:
            await store.aput(("memories", state["user_id"]), memory_key(text), {"text": text})
        return {}

    def recall(state: Chat, *, store: BaseStore) -> dict[str, Any]:
        hits = store.search(("memories", state["user_id"]), query=state["message"], limit=3)
        return {"recalled": [h.value["text"] for h in hits]}

    def remember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
        if (text := wanted(state)) is not None:
            store.put(("memories", state["user_id"]), memory_key(text), {"text": text})
        return {}

    graph: StateGraph[Chat] = StateGraph(Chat)
    graph.add_node("recall", recall if sync else arecall)
    graph.add_node("remember", remember if sync else aremember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "remember")
    graph.add_edge("remember", END)
    return graph


async def test_a_langgraph_graph_remembers_across_threads(store: MemstreamStore) -> None:
    app = remembering_graph().compile(checkpointer=InMemorySaver(), store=store)
    first = {"configurable": {"thread_id": "thread-1"}}
    second = {"configurable": {"thread_id": "thread-2"}}
    await app.ainvoke({"user_id": "u1", "message": "Remember: I am vegetarian.",
                       "recalled": []}, first)
    await app.ainvoke({"user_id": "u2", "message": "Remember: I eat fish every day.",
                       "recalled": []}, first)
    out = await app.ainvoke({"user_id": "u1", "message": "What should I cook for dinner?",
                             "recalled": []}, second)
    assert out["recalled"] == ["I am vegetarian."]  # from thread 1; not u2's
    # the second thread's state is its own; the memory came from the store
    assert (await app.aget_state(second)).values["message"].startswith("What should")


async def test_a_sync_graph_with_open_store(pipeline: Pipeline) -> None:
    def run() -> dict[str, Any]:
        with open_store(pipeline.settings, user_id="app", prefix="sync") as store:
            app = remembering_graph(sync=True).compile(checkpointer=InMemorySaver(),
                                                       store=store)
            app.invoke({"user_id": "u9", "message": "Remember: my cat is called Miso.",
                        "recalled": []}, {"configurable": {"thread_id": "a"}})
            out = app.invoke({"user_id": "u9", "message": "what is my cat called?",
                              "recalled": []}, {"configurable": {"thread_id": "b"}})
            # async calls from a loop that is not the client's are sent over to it
            asyncio.run(store.aput(("memories", "u9"), "dog", {"text": "my dog is Rex."}))
            out["dog"] = asyncio.run(store.aget(("memories", "u9"), "dog"))
            return out

    out = await asyncio.to_thread(run)  # the test's loop keeps running the worker meanwhile
    assert out["recalled"] == ["my cat is called Miso."]
    assert out["dog"].value == {"text": "my dog is Rex."}


async def test_the_examples_of_docs_agents_run_as_written(pipeline: Pipeline,
                                                         tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 2
    env = pipeline_env(pipeline)
    outputs = []
    for code in blocks:
        (tmp_path / "example.py").write_text(code, encoding="utf-8")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "example.py", cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, err.decode()[-2000:]
        outputs.append(out.decode())
    assert outputs[0] == "['Alice is vegetarian.']\n"
    assert re.fullmatch(r"\{'text': 'Alice lives in Lyon.'\}\n#[0-9a-f]{8}: Alice lives in "
                        r"Lyon\.\n#[0-9a-f]{8}: Alice is vegetarian\.\n", outputs[1]), outputs[1]

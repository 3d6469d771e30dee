"""A LangGraph ``BaseStore`` backed by memstream (extra ``memstream[langgraph]``).

Each namespace is a memory cube (``<prefix>.<label>.<label>…``, one user owns them all) and
each item one memory whose id is derived from its cube and key, so a put of an existing key
updates that memory (its history records the change) and a delete removes it. Items are
searched with memstream's own retrieval (a search over several namespaces is scored again
on one scale: ``langgraph_scores.py``); what memstream does to memories applies to them
too (two items saying the same thing may be merged: the older one stays readable by key but
leaves search results). The namespaces the store wrote are kept as records of a catalogue
cube (``<prefix>``), so ``list_namespaces`` needs no scan of the log. Writes return once
applied (read-your-writes), so a ``get`` after a ``put`` sees it. Beyond ``BaseStore``,
``context``/``acontext`` give a search's items as one block of text for a prompt, within a
budget (``topics/context.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from memstream.agents.langgraph_scores import MergedScores
from memstream.agents.langgraph_values import decode, encode, matches, text_of
from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.topics.context import (
    DEFAULT_BUDGET,
    ContextBlock,
    Unit,
    hits_for,
    render_context,
)
from memstream.topics.events import (
    MAX_TOP_K,
    DeadLetter,
    DeleteNodes,
    UpdateNode,
    WriteToken,
)
from memstream.topics.ids import stable_id
from memstream.topics.models import ItemMemoryType, MemoryItem
from memstream.topics.registry import DEAD_LETTER
from memstream.topics.settings import Settings

if TYPE_CHECKING:
    from memstream.streams.embed.port import Embedder

T = TypeVar("T")
CATALOGUE_TYPE: ItemMemoryType = "EpisodicMemory"  # never merged, copied or reorganized


class StoreWriteFailed(RuntimeError):
    """memstream refused a put or a delete (the reason is memstream's, e.g. a frozen item)."""


class MemstreamStore(BaseStore):
    """LangGraph long-term memory in memstream: ``await store.aput(ns, key, value)``,
    ``store.search(ns, query=...)``, … (sync calls run on the client's event loop)."""

    def __init__(self, client: MemoryClient, user_id: str, *, prefix: str = "langgraph",
                 memory_type: ItemMemoryType = "LongTermMemory",
                 index: Sequence[str] | None = None, timeout: float = 120.0,
                 loop: asyncio.AbstractEventLoop | None = None,
                 embedder: Embedder | None = None) -> None:
        """``client``: a started client; ``index``: the value fields memstream embeds
        (LangGraph paths; default: the value's string fields); ``loop``: the client's loop
        (default: the running one), where sync calls from other threads are sent;
        ``embedder``: what scores a search over several namespaces on one scale (default:
        the embedder the client's settings name, built on first use; ``close`` closes it)."""
        if not prefix or "." in prefix:
            raise ValueError("prefix must be non-empty and hold no '.'")
        self.client = client
        self.user_id = user_id
        self.prefix = prefix
        self.memory_type = memory_type
        self.index = list(index) if index is not None else None
        self.timeout = timeout
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise ValueError("MemstreamStore needs the client's event loop: create it "
                                 "inside that loop, pass loop=, or use open_store()") from None
        self.loop = loop
        self.scores = MergedScores(client.settings, embedder)
        self._catalogued: set[tuple[str, ...]] = set()

    async def close(self) -> None:
        """Close what the store made for itself (the embedder of ``scores``); the client
        stays open."""
        await self.scores.close()

    # ------------------------------------------------------------------ naming

    def cube_of(self, namespace: tuple[str, ...]) -> str:
        """The cube holding a namespace (labels hold no '.', so the name is unambiguous)."""
        return ".".join((self.prefix, *namespace))

    def node_id(self, namespace: tuple[str, ...], key: str) -> str:
        return stable_id("langgraph-item", self.cube_of(namespace), key)

    # ------------------------------------------------------------------ BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._sync(self._run(list(ops)))

    def _sync(self, call: Coroutine[Any, Any, T]) -> T:
        """Run ``call`` on the client's loop and wait for it (from another thread)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            call.close()
            raise RuntimeError("a sync MemstreamStore call on the event loop its client runs "
                               "on would block that loop: use the async methods (aget, aput, "
                               "asearch, acontext, …) there")
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        if asyncio.get_running_loop() is self.loop:
            return await self._run(listed)
        future = asyncio.run_coroutine_threadsafe(self._run(listed), self.loop)
        return await asyncio.wrap_future(future)

    async def _run(self, ops: list[Op]) -> list[Result]:
        """Ops in order; consecutive puts are published together and awaited once."""
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, PutOp):
                j = i
                while j < len(ops) and isinstance(ops[j], PutOp):
                    j += 1
                await self._puts([o for o in ops[i:j] if isinstance(o, PutOp)])
                results += [None] * (j - i)
                i = j
                continue
            match op:
                case GetOp():
                    results.append(await self._get(op.namespace, op.key))
                case SearchOp():
                    results.append(await self._search(op))
                case ListNamespacesOp():
                    results.append(await self._namespaces(op))
                case _:
                    raise ValueError(f"unknown store operation {type(op).__name__}")
            i += 1
        return results

    # ------------------------------------------------------------------ reads

    async def _nodes(self, cube: str, ids: Sequence[str]) -> list[MemoryItem]:
        try:
            return await self.client.get(self.user_id, ids, cube_id=cube, timeout=self.timeout)
        except MemoryServiceError as exc:
            if exc.type == "UnknownCube":
                return []
            raise

    async def _all(self, cube: str, memory_type: ItemMemoryType) -> list[MemoryItem]:
        try:
            return await self.client.get_all(self.user_id, cube, memory_type,
                                             timeout=self.timeout)
        except MemoryServiceError as exc:
            if exc.type == "UnknownCube":
                return []
            raise

    def _item(self, node: MemoryItem, namespace: tuple[str, ...],
              score: float | None = None, scored: bool = False) -> Item | None:
        env = decode(node.metadata.background)
        if env is None or env.namespace != namespace or node.id != self.node_id(
                namespace, env.key):
            return None  # a summary or an inference memstream wrote in the cube
        md = node.metadata
        if scored:
            return SearchItem(namespace, env.key, env.value, md.created_at, md.updated_at,
                              score)
        return Item(value=env.value, key=env.key, namespace=namespace,
                    created_at=md.created_at, updated_at=md.updated_at)

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        nodes = await self._nodes(self.cube_of(namespace), [self.node_id(namespace, key)])
        return self._item(nodes[0], namespace) if nodes else None

    # ------------------------------------------------------------------ context

    async def acontext(self, namespace_prefix: tuple[str, ...], query: str,
                       budget: int = DEFAULT_BUDGET, unit: Unit = "chars", *,
                       filter: dict[str, Any] | None = None) -> ContextBlock:
        """The items under ``namespace_prefix`` that answer ``query``, as one block of text
        for a prompt (``memstream.topics.context``): ranked as ``asearch`` ranks them, each
        with its memstream id and date, within ``budget`` characters (``unit="tokens"``:
        estimated tokens); ``.text``, and ``.ids`` (memstream ids, as ``memstream get``
        takes them)."""
        op = SearchOp(namespace_prefix, filter, hits_for(budget, unit), 0, query)
        return render_context([node for _, node in await self._ranked(op)], budget, unit)

    def context(self, namespace_prefix: tuple[str, ...], query: str,
                budget: int = DEFAULT_BUDGET, unit: Unit = "chars", *,
                filter: dict[str, Any] | None = None) -> ContextBlock:
        """``acontext`` for sync code (from another thread than the client's loop)."""
        return self._sync(self.acontext(namespace_prefix, query, budget, unit, filter=filter))

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        return [item for item, _ in await self._ranked(op)]

    async def _ranked(self, op: SearchOp) -> list[tuple[SearchItem, MemoryItem]]:
        """The items ``op`` finds, with their memories, in the order a search returns them."""
        if op.limit <= 0:
            return []
        namespaces = await self._catalogue(
            (MatchCondition("prefix", op.namespace_prefix),) if op.namespace_prefix else ())
        per_cube = await asyncio.gather(*(self._search_one(ns, op) for ns in namespaces))
        hits = [hit for found in per_cube for hit in found]
        if op.query and sum(1 for found in per_cube if found) > 1:
            # each cube scored its own on its own scale: one scale over them all
            scores = await self.scores.scores(op.query, [node for _, node in hits])
            hits = [(_rescored(item, score), node)
                    for (item, node), score in zip(hits, scores, strict=True)]
        if op.query:
            hits.sort(key=lambda hit: hit[0].score or 0.0, reverse=True)
        else:
            hits.sort(key=lambda hit: (hit[0].updated_at, hit[0].namespace, hit[0].key),
                      reverse=True)
        return hits[op.offset: op.offset + op.limit]

    async def _search_one(self, namespace: tuple[str, ...],
                          op: SearchOp) -> list[tuple[SearchItem, MemoryItem]]:
        cube = self.cube_of(namespace)
        items: list[tuple[SearchItem, MemoryItem]] = []
        if op.query:
            # memstream ranks at most MAX_TOP_K per request; a filter is applied to those
            want = MAX_TOP_K if op.filter else min(MAX_TOP_K, op.offset + op.limit)
            try:
                hits = await self.client.search(self.user_id, op.query, cube_id=cube,
                                                top_k=want, memory_type=self.memory_type,
                                                timeout=self.timeout)
            except MemoryServiceError as exc:
                if exc.type == "UnknownCube":
                    return []
                raise
            candidates: list[tuple[MemoryItem, float | None]] = [
                (h.item, h.score) for h in hits]
        else:
            candidates = [(n, None) for n in await self._all(cube, self.memory_type)
                          if n.metadata.status == "activated"]
        for node, score in candidates:
            item = self._item(node, namespace, score, scored=True)
            if isinstance(item, SearchItem) and matches(item.value, op.filter):
                items.append((item, node))
        return items

    async def _catalogue(self, conditions: Sequence[MatchCondition]) -> list[tuple[str, ...]]:
        """The namespaces the store wrote that meet every condition, sorted."""
        found = set()
        for node in await self._all(self.prefix, CATALOGUE_TYPE):
            env = decode(node.metadata.background)
            if env is not None and node.id == self._catalogue_id(env.namespace):
                found.add(env.namespace)
        return sorted(ns for ns in found if all(_meets(c, ns) for c in conditions))

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = await self._catalogue(op.match_conditions or ())
        if op.max_depth is not None:
            names = sorted({ns[: op.max_depth] for ns in names})
        return names[op.offset: op.offset + op.limit]

    # ------------------------------------------------------------------ writes

    def _catalogue_id(self, namespace: tuple[str, ...]) -> str:
        return stable_id("langgraph-namespace", self.prefix, self.cube_of(namespace))

    async def _puts(self, ops: Sequence[PutOp]) -> None:
        """Publish a run of puts (the last put of a key wins), then wait until applied."""
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if op.ttl is not None:
                raise NotImplementedError("MemstreamStore keeps items until deleted: TTLs are "
                                          "not supported (memstream archives unused memories "
                                          "by its own lifecycle settings)")
            last[(op.namespace, op.key)] = op
        by_namespace: dict[tuple[str, ...], list[PutOp]] = {}
        for (namespace, _), op in last.items():
            by_namespace.setdefault(namespace, []).append(op)
        tokens: list[WriteToken] = []
        for namespace, group in by_namespace.items():
            tokens += await self._write(namespace, group)
        await asyncio.gather(*(self.client.wait_applied(t, timeout=self.timeout)
                               for t in tokens))
        if tokens:
            for namespace, group in by_namespace.items():
                await self._verify(namespace, group, tokens)

    async def _write(self, namespace: tuple[str, ...], ops: Sequence[PutOp]) -> list[WriteToken]:
        cube = self.cube_of(namespace)
        ids = {op.key: self.node_id(namespace, op.key) for op in ops}
        stored = {n.id: n for n in await self._nodes(cube, list(ids.values()))}
        tokens: list[WriteToken] = []
        fresh: list[dict[str, Any]] = []
        gone: list[str] = []
        for op in ops:
            node = stored.get(ids[op.key])
            if op.value is None:
                if node is not None:
                    gone.append(node.id)
                continue
            text = text_of(op.key, op.value, self.index if op.index is None or op.index is
                           False else op.index)
            background = encode(namespace, op.key, op.value)
            if node is None:
                fresh.append({"id": ids[op.key], "memory": text, "key": op.key,
                              "background": background, "memory_type": self.memory_type})
            elif (node.memory, node.metadata.background, node.metadata.status) != (
                    text, background, "activated"):
                tokens.append(await self.client.command(UpdateNode(
                    user_id=self.user_id, cube_id=cube, node_id=node.id, memory=text,
                    background=background, key=op.key,
                    status=None if node.metadata.status == "activated" else "activated")))
        if gone:
            tokens.append(await self.client.command(DeleteNodes(
                user_id=self.user_id, cube_id=cube, node_ids=tuple(gone))))
        if fresh:
            tokens.append(await self.client.add_memories(self.user_id, fresh, cube_id=cube))
            if namespace not in self._catalogued:
                tokens.append(await self.client.add_memories(self.user_id, [{
                    "id": self._catalogue_id(namespace), "memory": cube, "key": cube,
                    "background": encode(namespace, "", {}), "memory_type": CATALOGUE_TYPE,
                }], cube_id=self.prefix))
                self._catalogued.add(namespace)
        return tokens

    async def _verify(self, namespace: tuple[str, ...], ops: Sequence[PutOp],
                      tokens: Sequence[WriteToken]) -> None:
        """Read the written items back (one request): a write memstream refused fails
        loudly, with the reason from its dead letter."""
        cube = self.cube_of(namespace)
        stored = {n.id: n for n in await self._nodes(
            cube, [self.node_id(namespace, op.key) for op in ops])}
        for op in ops:
            node = stored.get(self.node_id(namespace, op.key))
            if op.value is None:
                ok = node is None
            else:
                ok = node is not None and node.metadata.background == encode(
                    namespace, op.key, op.value)
            if not ok:
                raise StoreWriteFailed(f"memstream did not apply the "
                                       f"{'delete' if op.value is None else 'put'} of "
                                       f"{op.key!r} in {namespace}: "
                                       f"{await self._refusal(tokens)}")

    async def _refusal(self, tokens: Sequence[WriteToken]) -> str:
        where = {(t.topic, t.partition, t.offset) for t in tokens}
        for letter in await self.client.history(DEAD_LETTER):
            if isinstance(letter, DeadLetter) and (
                    letter.original_topic, letter.original_partition,
                    letter.original_offset) in where:
                return letter.error
        return "no dead letter names it (see `memstream dead-letters`)"


def _rescored(item: SearchItem, score: float) -> SearchItem:
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at,
                      score)


def _meets(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False) if condition.match_type == "prefix" \
        else zip(reversed(namespace), reversed(path), strict=False)
    return all(want == "*" or have == want for have, want in pairs)


@asynccontextmanager
async def connect_store(settings: Settings | None = None, *, user_id: str,
                        **options: Any) -> AsyncIterator[MemstreamStore]:
    """A store with its own client on the running loop, closed on exit."""
    async with MemoryClient(settings or Settings()) as client:
        store = MemstreamStore(client, user_id, **options)
        try:
            yield store
        finally:
            await store.close()


@contextmanager
def open_store(settings: Settings | None = None, *, user_id: str,
               **options: Any) -> Iterator[MemstreamStore]:
    """A store for sync code (``graph.invoke``): its client runs on a loop of its own in a
    background thread, stopped on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="memstream-store", daemon=True)
    thread.start()
    client = MemoryClient(settings or Settings())
    try:
        asyncio.run_coroutine_threadsafe(client.start(), loop).result()
        store = MemstreamStore(client, user_id, loop=loop, **options)
        try:
            yield store
        finally:
            asyncio.run_coroutine_threadsafe(store.close(), loop).result()
    finally:
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()

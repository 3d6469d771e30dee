"""The read calls answered by a worker: search, context, subgraph, get, get_all,
working memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from memstream.client.transport import RequestCalls
from memstream.topics.context import DEFAULT_BUDGET, ContextBlock, Unit, hits_for, render_context
from memstream.topics.events import (
    GetAllRequest,
    GetRequest,
    NodesResult,
    RequestBase,
    ScoredMemory,
    SearchRequest,
    SearchResult,
    SubgraphRequest,
    SubgraphResult,
    WorkingMemoryRequest,
    WriteToken,
)
from memstream.topics.models import MemoryItem, MemoryType, SearchMemoryType, Subgraph


class QueryCalls(RequestCalls):
    """Each call is one request (``get_all``: one per page) and its typed result."""

    async def search(
        self,
        user_id: str,
        query: str,
        cube_id: str | None = None,
        top_k: int = 10,
        mode: Literal["fast", "fine"] = "fast",
        memory_type: SearchMemoryType = "All",
        search_filter: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        chat_history: Sequence[Mapping[str, str]] = (),
        after: WriteToken | None = None,
        timeout: float = 30.0,
        min_score: float = 0.0,
        cube_ids: Sequence[str] = (),
    ) -> list[ScoredMemory]:
        """Memories answering ``query``, best first. ``after``: wait until that write is applied;
        ``min_score`` (0..1): leave out hits scoring below it. ``cube_ids``: more cubes to
        search with ``cube_id`` (default: the first of them, else the user's own): one ranking
        over them all, on one score scale, each turn once; the user must be allowed to read
        every one."""
        cube = cube_id or (cube_ids[0] if cube_ids else user_id)
        req = SearchRequest(
            user_id=user_id, cube_id=cube, query=query, top_k=top_k, mode=mode,
            memory_type=memory_type, search_filter=dict(search_filter) if search_filter else None,
            session_id=session_id, chat_history=tuple(dict(t) for t in chat_history), after=after,
            min_score=min_score, cube_ids=tuple(c for c in cube_ids if c != cube),
        )
        result = (await self.request(req, timeout)).result
        assert isinstance(result, SearchResult)  # noqa: S101
        return list(result.memories)

    async def context(
        self,
        user_id: str,
        query: str,
        budget: int = DEFAULT_BUDGET,
        cube_id: str | None = None,
        cube_ids: Sequence[str] | None = None,
        *,
        unit: Unit = "chars",
        top_k: int | None = None,
        memory_type: SearchMemoryType = "All",
        search_filter: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        after: WriteToken | None = None,
        timeout: float = 30.0,
    ) -> ContextBlock:
        """A block ready for a prompt: the hits of a fast search for ``query``, most relevant
        first, each with its id, date and speakers, within ``budget`` characters (``unit=
        "tokens"``: estimated tokens); ``.text`` and ``.ids`` (``memstream.topics.context``).
        ``top_k``: hits asked for (default: enough to fill the budget). ``cube_ids``: more
        cubes searched with ``cube_id``, as ``search`` does (one ranking)."""
        if budget < 1:
            raise ValueError("budget must be at least 1")
        hits = await self.search(
            user_id, query, cube_id=cube_id, top_k=top_k or hits_for(budget, unit),
            memory_type=memory_type, search_filter=search_filter, session_id=session_id,
            after=after, timeout=timeout, cube_ids=cube_ids or ())
        return render_context(hits, budget, unit)

    async def subgraph(
        self, user_id: str, query: str, cube_id: str | None = None, top_k: int = 5,
        depth: int = 2, timeout: float = 30.0,
    ) -> Subgraph:
        """The nodes most similar to ``query`` with their neighbourhoods, merged."""
        req = SubgraphRequest(user_id=user_id, cube_id=cube_id or user_id, query=query,
                              top_k=top_k, depth=depth)
        result = (await self.request(req, timeout)).result
        assert isinstance(result, SubgraphResult)  # noqa: S101
        return result.subgraph

    async def get(
        self, user_id: str, ids: Sequence[str], cube_id: str | None = None, timeout: float = 30.0
    ) -> list[MemoryItem]:
        req = GetRequest(user_id=user_id, cube_id=cube_id or user_id, ids=tuple(ids))
        return await self._nodes(req, timeout)

    async def get_all(
        self, user_id: str, cube_id: str | None = None, memory_type: MemoryType | None = None,
        include_inactive: bool = False, timeout: float = 30.0, limit: int | None = None,
    ) -> list[MemoryItem]:
        """Every node of the cube (at most ``limit``), page by page; replies are bounded."""
        nodes: list[MemoryItem] = []
        offset: int | None = 0
        while offset is not None and (limit is None or len(nodes) < limit):
            page_size = self.settings.limits.page_nodes  # what one reply may carry
            want = page_size if limit is None else min(page_size, limit - len(nodes))
            page = await self.get_all_page(user_id, cube_id, memory_type, include_inactive,
                                           offset, want, timeout)
            nodes += page.nodes
            offset = page.next_offset if page.nodes else None
        return nodes

    async def get_all_page(
        self, user_id: str, cube_id: str | None = None, memory_type: MemoryType | None = None,
        include_inactive: bool = False, offset: int = 0, limit: int = 1000,
        timeout: float = 30.0,
    ) -> NodesResult:
        """One page of ``get_all``: ``total``, and ``next_offset`` when more nodes follow."""
        req = GetAllRequest(user_id=user_id, cube_id=cube_id or user_id, memory_type=memory_type,
                            include_inactive=include_inactive, offset=offset, limit=limit)
        result = (await self.request(req, timeout)).result
        assert isinstance(result, NodesResult)  # noqa: S101
        return result

    async def working_memory(
        self, user_id: str, cube_id: str | None = None, timeout: float = 30.0
    ) -> list[MemoryItem]:
        """The cube's working memory, in its current order."""
        req = WorkingMemoryRequest(user_id=user_id, cube_id=cube_id or user_id)
        return await self._nodes(req, timeout)

    async def _nodes(self, req: RequestBase, timeout: float) -> list[MemoryItem]:
        result = (await self.request(req, timeout)).result
        assert isinstance(result, NodesResult)  # noqa: S101
        return list(result.nodes)

"""What the MCP tools do, on one user's cube, as plain async methods over ``MemoryClient``.

The identity (user and cube) is fixed when the tools are made, from the server's
configuration: no method takes a user or a cube, so a model can never name another
user's memories. Kept free of the MCP SDK so it is tested and reused without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memstream.agents.views import change_view, explanation_view, memory_view
from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.history.ids import NodeNotFound, Resolved, stored
from memstream.history.provenance import History
from memstream.topics.context import Unit, render_context
from memstream.topics.events import (
    ActivationMemory,
    DeleteNodes,
    Event,
    UpdateNode,
    WriteToken,
    new_event_id,
)
from memstream.topics.models import (
    VERDICTS,
    MemoryItem,
    MemoryType,
    SearchMemoryType,
    Verdict,
    utcnow,
)
from memstream.topics.registry import ACTIVATION_MEMORY

# What a list shows by default: stored memories, not working-memory copies.
LISTED_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory", "EpisodicMemory")
WRITE_TIMEOUT_S = 120.0


class ToolFailure(ValueError):
    """A tool cannot do what was asked; the message is one line for the model to read."""


@dataclass(frozen=True)
class Identity:
    """Whose memories the tools act on (from configuration, never from the model)."""

    user_id: str
    cube_id: str
    # More cubes its searches read with ``cube_id`` (shared with the user), as one ranking;
    # writes go to ``cube_id`` only.
    read_cubes: tuple[str, ...] = ()


class MemoryTools:
    """The operations behind the MCP tools and resources."""

    def __init__(self, client: MemoryClient, identity: Identity) -> None:
        self.client = client
        self.me = identity

    # ------------------------------------------------------------------ writes

    async def add_memory(self, text: str, memory_type: Literal["LongTermMemory", "UserMemory"],
                         tags: Sequence[str], session_id: str | None) -> dict[str, Any]:
        """Store one statement as is (no extraction); returns it once it is searchable."""
        if not text.strip():
            raise ToolFailure("text is empty: give the statement to remember")
        node_id = new_event_id()
        token = await self.client.add_memories(
            self.me.user_id,
            [{"id": node_id, "memory": text.strip(), "memory_type": memory_type,
              "tags": tuple(t.strip() for t in tags if t.strip())}],
            cube_id=self.me.cube_id, session_id=session_id)
        await self._applied(token)
        nodes = await self.client.get(self.me.user_id, [node_id], cube_id=self.me.cube_id)
        if not nodes:
            raise ToolFailure(f"memory {node_id} was not stored; see `memstream dead-letters`")
        return {"stored": memory_view(nodes[0])}

    async def add_chat_turn(self, user_message: str, assistant_message: str | None,
                            session_id: str | None) -> dict[str, Any]:
        """Publish one exchange for extraction; returns what it yielded once applied."""
        if not user_message.strip():
            raise ToolFailure("user_message is empty")
        chunk = new_event_id()
        now = utcnow()
        messages: list[dict[str, Any]] = [
            {"id": f"{chunk}-0", "role": "user", "content": user_message, "timestamp": now}]
        if assistant_message and assistant_message.strip():
            messages.append({"id": f"{chunk}-1", "role": "assistant",
                             "content": assistant_message, "timestamp": now})
        token = await self.client.add_messages(self.me.user_id, messages,
                                               cube_id=self.me.cube_id, session_id=session_id)
        # the scheduler keeps working memory (and the activation block) fresh for the next turn
        await self.client.schedule(self.me.user_id, "query", user_message,
                                   cube_id=self.me.cube_id, session_id=session_id)
        if assistant_message and assistant_message.strip():
            await self.client.schedule(self.me.user_id, "answer", assistant_message,
                                       cube_id=self.me.cube_id, session_id=session_id)
        await self._applied(token)
        ids = {m["id"] for m in messages}
        hits = await self.client.search(self.me.user_id, user_message, cube_id=self.me.cube_id,
                                        top_k=20)
        mine = [memory_view(h.item) for h in hits
                if any(s.message_id in ids for s in h.item.metadata.sources)]
        return {"message_ids": sorted(ids), "extracted": mine}

    async def update(self, memory_id: str, text: str | None, tags: Sequence[str] | None,
                     key: str | None, status: Literal["activated", "archived"] | None,
                     ) -> dict[str, Any]:
        if all(v is None for v in (text, tags, key, status)):
            raise ToolFailure("nothing to change: give text, tags, key or status")
        (node,) = await self._existing([memory_id.strip()])
        event = UpdateNode(
            user_id=self.me.user_id, cube_id=self.me.cube_id, node_id=node.id,
            memory=text.strip() if text is not None else None, key=key, status=status,
            tags=tuple(t.strip() for t in tags if t.strip()) if tags is not None else None)
        await self._command(event, "update")
        (node,) = await self._existing([node.id])
        return {"updated": memory_view(node)}

    async def feedback(self, memory_id: str, verdict: Verdict, note: str | None,
                       query: str | None) -> dict[str, Any]:
        """The agent's verdict on a memory (a working-memory copy's goes to its memory), once
        applied; returns the memory as it now stands."""
        if verdict not in VERDICTS:
            raise ToolFailure(f"unknown verdict {verdict!r}: use one of {', '.join(VERDICTS)}")
        (node,) = await self._existing([memory_id.strip()])
        target = node.metadata.origin_id or node.id
        token = await self.client.feedback(
            self.me.user_id, target, verdict, (note or "").strip(),
            query=query.strip() if query and query.strip() else None, cube_id=self.me.cube_id)
        await self._carried_out(token, "feedback")
        (node,) = await self._existing([target])
        return {"verdict": verdict, "memory": memory_view(node)}

    async def delete(self, memory_ids: Sequence[str]) -> dict[str, Any]:
        ids = tuple(dict.fromkeys(i.strip() for i in memory_ids if i.strip()))
        if not ids:
            raise ToolFailure("no memory id given")
        full = tuple(n.id for n in await self._existing(ids))
        await self._command(DeleteNodes(user_id=self.me.user_id, cube_id=self.me.cube_id,
                                        node_ids=full), "delete")
        return {"deleted": list(full)}

    # ------------------------------------------------------------------ reads

    async def search(self, query: str, top_k: int, min_score: float | None,
                     memory_type: SearchMemoryType, session_id: str | None,
                     tags: Sequence[str]) -> dict[str, Any]:
        """Ranked memories; ``min_score`` is applied here, after the service's ranking."""
        if not query.strip():
            raise ToolFailure("query is empty: say what to look for")
        search_filter: dict[str, Any] = {}
        if session_id:
            search_filter["session_id"] = session_id
        if tags:
            search_filter["tags"] = {"contains": tags[0]} if len(tags) == 1 \
                else {"in": list(tags)}
        hits = await self.client.search(
            self.me.user_id, query, cube_id=self.me.cube_id, top_k=top_k,
            memory_type=memory_type, search_filter=search_filter or None,
            cube_ids=self.me.read_cubes)
        # on the score as shown (rounded), so a threshold copied from a result keeps it
        kept = [h for h in hits if min_score is None or round(h.score, 4) >= min_score]
        return {"query": query, "results": [memory_view(h.item, h.score) for h in kept],
                "dropped_below_min_score": len(hits) - len(kept)}

    async def get(self, memory_ids: Sequence[str]) -> dict[str, Any]:
        ids = [i.strip() for i in memory_ids if i.strip()]
        if not ids:
            raise ToolFailure("no memory id given")
        resolved = await self._resolved(ids)
        return {"memories": [memory_view(n, sources=True) for n in resolved.nodes],
                "not_found": list(resolved.missing)}

    async def list_memories(self, memory_type: MemoryType | None, limit: int,
                   include_archived: bool) -> dict[str, Any]:
        nodes: list[MemoryItem] = []
        total = 0
        for t in (memory_type,) if memory_type else LISTED_TYPES:
            page = await self.client.get_all_page(self.me.user_id, self.me.cube_id, t,
                                                  include_archived, limit=limit)
            total += page.total or 0
            nodes += page.nodes
        # what an agent called wrong is never listed (get, history and explain still show it)
        wrong = [n for n in nodes if n.metadata.feedback == "wrong"]
        nodes = [n for n in nodes if n.metadata.feedback != "wrong"]
        nodes.sort(key=lambda n: n.metadata.updated_at, reverse=True)
        return {"total": total - len(wrong),
                "memories": [memory_view(n) for n in nodes[:limit]]}

    async def history(self, memory_id: str) -> dict[str, Any]:
        changes = await self.client.memory_history(await self._logged(memory_id),
                                                   self.me.cube_id)
        node_id, copy_of = (changes.node_id, changes.copy_of) if isinstance(
            changes, History) else (memory_id, None)
        view: dict[str, Any] = {"id": node_id}
        if copy_of is not None:
            view["copy_of"] = copy_of
        view["changes"] = [change_view(c, node_id, copy_of) for c in changes]
        return view

    async def explain(self, memory_id: str) -> dict[str, Any]:
        return explanation_view(await self.client.explain(await self._logged(memory_id),
                                                          self.me.cube_id))

    async def context(self, query: str, budget: int, unit: Unit) -> dict[str, Any]:
        """The context block for ``query`` (``MemoryClient.context``), with its ids."""
        if not query.strip():
            raise ToolFailure("query is empty: say what to look for")
        block = await self.client.context(self.me.user_id, query, budget,
                                          cube_id=self.me.cube_id, cube_ids=self.me.read_cubes,
                                          unit=unit)
        return {"context": block.text, "ids": list(block.ids), "left_out": block.left_out,
                "used": block.used, "budget": block.budget, "unit": block.unit}

    async def _working_nodes(self) -> list[MemoryItem]:
        try:
            return await self.client.working_memory(self.me.user_id, self.me.cube_id)
        except MemoryServiceError as exc:
            if exc.type == "UnknownCube":
                return []
            raise

    async def working_memory(self) -> list[dict[str, Any]]:
        return [memory_view(n) for n in await self._working_nodes()]

    async def activation_block(self) -> str:
        """The newest block the scheduler published for the cube; until it published one,
        the working memory rendered the same way (said so on the first line)."""
        blocks = [e for e in await self.client.history(ACTIVATION_MEMORY, self.me.cube_id)
                  if isinstance(e, ActivationMemory)]
        if blocks:
            return max(blocks, key=lambda b: b.occurred_at).text
        return render_context(
            await self._working_nodes(), self.client.settings.scheduler.activation_budget,
            header="Known about the user (working memory; no activation block published yet):",
            empty="").text

    # ------------------------------------------------------------------ helpers

    async def _applied(self, token: WriteToken) -> None:
        await self.client.wait_applied(token, timeout=WRITE_TIMEOUT_S)

    async def _resolved(self, ids: Sequence[str]) -> Resolved:
        """What ``ids`` name in this cube, as the command line resolves them (full ids or
        prefixes of 8+ characters: ``memstream/history/ids.py``), read as this user."""
        try:
            return await stored(self.client, self.me.user_id, self.me.cube_id, ids)
        except MemoryServiceError as exc:
            raise ToolFailure(exc.message) from None

    async def _existing(self, ids: Sequence[str]) -> list[MemoryItem]:
        """The nodes these ids name in this cube, whatever their status; a missing one is a
        one-line failure."""
        try:
            return (await self._resolved(ids)).require()
        except NodeNotFound as exc:
            raise ToolFailure(f"{exc} (use search or list to find ids)") from None

    async def _logged(self, memory_id: str) -> str:
        """The id whose log ``history`` and ``explain`` read: the memory this user reads that
        ``memory_id`` names (a prefix resolved), else ``memory_id`` as given, for the log
        to resolve (a deleted memory keeps its history)."""
        if not memory_id.strip():
            raise ToolFailure("no memory id given")
        resolved = await self._resolved([memory_id.strip()])
        return resolved.nodes[0].id if resolved.nodes else memory_id.strip()

    async def _command(self, event: Event, what: str) -> None:
        await self._carried_out(await self.client.command(event), what)

    async def _carried_out(self, token: WriteToken, what: str) -> None:
        """Once the command behind ``token`` is applied; the worker's refusal as a failure."""
        await self._applied(token)
        failure = await self.client.command_failure(token)
        if failure is not None:
            raise ToolFailure(f"{what} refused: {failure}")


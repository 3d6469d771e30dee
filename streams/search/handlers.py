"""Answer one request: validate, dispatch by ``op``, and build the reply.

Invalid requests and unknown cubes get error replies (never a timeout) whenever the
payload names where to reply; only a payload with no usable reply address becomes a
dead letter. Usage is recorded by the agent after the reply is sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from streams.runtime import Deps, Outgoing, RawRecord, dead_letter
from streams.search.logic import search
from topics.events import (
    ErrorInfo,
    GetAllRequest,
    GetRequest,
    NodesResult,
    Reply,
    ReplyResult,
    RequestBase,
    SearchRequest,
    SearchResult,
    SubgraphRequest,
    SubgraphResult,
    WorkingMemoryRequest,
    WriteToken,
)
from topics.models import MEMORY_TYPES, Edge, MemoryItem, Subgraph, UsageRecord
from topics.registry import REPLIES, REQUESTS

log = logging.getLogger("memstream.search")
STAGE = "search"

WaitApplied = Callable[[WriteToken, float], Awaitable[None]]


class UnknownCube(LookupError):
    """The cube holds no memories at all."""


@dataclass
class Answer:
    """What answering a request produced: events to send, then usage to record."""

    outgoing: list[Outgoing] = field(default_factory=list)
    used: list[MemoryItem] = field(default_factory=list)
    request: RequestBase | None = None


def _reply_address(raw: bytes | None) -> dict[str, Any] | None:
    """Best effort: the reply fields of a payload that failed validation."""
    try:
        data = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("correlation_id"), str):
        return None
    user = data.get("user_id") if isinstance(data.get("user_id"), str) and data["user_id"] \
        else "unknown"
    cube = data.get("cube_id") if isinstance(data.get("cube_id"), str) and data["cube_id"] \
        else user
    return {"user_id": user, "cube_id": cube, "correlation_id": data["correlation_id"],
            "reply_to": data.get("reply_to") if isinstance(data.get("reply_to"), str) else None,
            "reply_partition": data.get("reply_partition")
            if isinstance(data.get("reply_partition"), int) else None,
            "requester": data.get("requester") if isinstance(data.get("requester"), str)
            else "client"}


def reply_outgoing(deps: Deps, address: dict[str, Any], reply: Reply) -> Outgoing:
    topic = address.get("reply_to") or REPLIES.name(deps.settings)
    return Outgoing(REPLIES, reply, key=str(address.get("requester", "client")).encode(),
                    topic=topic, partition=address.get("reply_partition"))


def _error(deps: Deps, address: dict[str, Any], exc: BaseException) -> Reply:
    message = str(exc) if not isinstance(exc, ValidationError) else \
        "invalid request: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return Reply(user_id=address["user_id"], cube_id=address["cube_id"], occurred_at=deps.clock(),
                 correlation_id=address["correlation_id"], ok=False,
                 error=ErrorInfo(type=type(exc).__name__, message=message))


async def _ensure_cube(deps: Deps, cube_id: str) -> None:
    counts = await deps.graph.count_by_type(cube_id, status=None)
    if not any(counts.values()):
        raise UnknownCube(f"cube {cube_id!r} has no memories")


async def _subgraph(req: SubgraphRequest, deps: Deps) -> Subgraph:
    vec = (await deps.embedder.embed_queries([req.query]))[0]
    centers = await deps.store.search(req.cube_id, np.asarray(vec).tolist(), req.top_k,
                                      memory_types=["LongTermMemory", "UserMemory"],
                                      status=req.center_status)
    nodes: dict[str, MemoryItem] = {}
    edges: dict[tuple[str, str, str], Edge] = {}
    for item, _ in centers:
        sub = await deps.graph.subgraph(req.cube_id, item.id, req.depth, req.center_status)
        for node in sub.nodes:
            nodes.setdefault(node.id, node)
        for edge in sub.edges:
            edges.setdefault((edge.source, edge.target, edge.type), edge)
    core = centers[0][0].id if centers else None
    return Subgraph(core_id=core, nodes=tuple(nodes.values()), edges=tuple(edges.values()))


async def _dispatch(req: RequestBase, deps: Deps, wait: WaitApplied) -> tuple[ReplyResult,
                                                                              list[MemoryItem]]:
    match req:
        case SearchRequest():
            if req.after is not None:
                await wait(req.after, deps.settings.search.after_timeout_s)
            found, mode = await search(req, deps)
            if not found:  # only an empty answer needs to know whether the cube exists
                await _ensure_cube(deps, req.cube_id)
            return SearchResult(memories=tuple(found), mode_used=mode), [s.item for s in found]  # type: ignore[arg-type]
        case SubgraphRequest():
            await _ensure_cube(deps, req.cube_id)
            return SubgraphResult(subgraph=await _subgraph(req, deps)), []
        case GetRequest():
            return NodesResult(nodes=tuple(await deps.graph.get_nodes(req.cube_id, req.ids))), []
        case GetAllRequest():
            await _ensure_cube(deps, req.cube_id)
            types = [req.memory_type] if req.memory_type else list(MEMORY_TYPES)
            status = None if req.include_inactive else "activated"
            nodes: list[MemoryItem] = []
            for memory_type in types:
                nodes += await deps.graph.all_of_type(req.cube_id, memory_type, status)  # type: ignore[arg-type]
            return NodesResult(nodes=tuple(nodes[: req.limit])), []
        case WorkingMemoryRequest():
            items = await deps.graph.all_of_type(req.cube_id, "WorkingMemory")
            return NodesResult(nodes=tuple(items)), []
    raise ValueError(f"unsupported request {type(req).__name__}")


async def answer(raw: RawRecord, deps: Deps, wait: WaitApplied) -> Answer:
    """The reply (or dead letter) for one raw request record."""
    try:
        req = REQUESTS.decode(raw.value or b"")
    except ValidationError as exc:
        address = _reply_address(raw.value)
        if address is None:
            return Answer([dead_letter(STAGE, raw, exc, 1, deps.clock)])
        log.info("invalid request %s: %s", address["correlation_id"], exc.error_count())
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc)),
                       dead_letter(STAGE, raw, exc, 1, deps.clock)])
    assert isinstance(req, RequestBase)  # noqa: S101
    address = {"user_id": req.user_id, "cube_id": req.cube_id,
               "correlation_id": req.correlation_id, "reply_to": req.reply_to,
               "reply_partition": req.reply_partition, "requester": req.requester}
    try:
        result, used = await _dispatch(req, deps, wait)
    except (UnknownCube, ValueError, TimeoutError) as exc:
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc))], request=req)
    except Exception as exc:  # noqa: BLE001 - a failing request still gets an answer
        log.exception("request %s failed", req.correlation_id)
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc))], request=req)
    reply = Reply(user_id=req.user_id, cube_id=req.cube_id, occurred_at=deps.clock(),
                  correlation_id=req.correlation_id, ok=True, result=result)
    return Answer([reply_outgoing(deps, address, reply)], used, req)


async def record_usage(deps: Deps, request: RequestBase, items: list[MemoryItem]) -> None:
    """Append a usage record to each returned node (bounded history), after the reply."""
    if not items:
        return
    query = getattr(request, "query", None)
    record = UsageRecord(at=deps.clock(), requester=request.requester, query=query)
    await deps.graph.record_usage(request.cube_id, [i.id for i in items], record,
                                  deps.settings.search.usage_history, seen=items)

"""Answer one request: validate, dispatch by ``op``, and build the reply.

Invalid requests, requests over a size limit and unknown cubes get error replies (never
a timeout) whenever the payload names where to reply; only a payload with no usable reply
address (or nested too deep to parse safely) becomes a dead letter. No reply exceeds
``limits.event_bytes``: a get_all page carries fewer nodes and says so, any other reply
that would is replaced by an error naming the limit. Usage is recorded by the agent after
the reply is sent (``streams/search/usage.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from memstream.security.signing import SignatureRefused
from memstream.sinks.freshness import relaxed_reads
from memstream.sinks.ports import VectorQuery
from memstream.streams import metering
from memstream.streams.core.across import search_cubes
from memstream.streams.ops.access import AccessDenied, check_read
from memstream.streams.ops.governance import degrade
from memstream.streams.runtime.stage import Deps, Outgoing, RawRecord, dead_letter
from memstream.streams.runtime.trust import verify_record
from memstream.streams.search.data_key import NoDataKey, data_key_result, reply_spec
from memstream.streams.search.log_refs import log_refs_result, nodes_by_ids_or_prefixes
from memstream.streams.search.paging import page_of_types
from memstream.topics.events import (
    DataKeyRequest,
    ErrorInfo,
    GetAllRequest,
    GetRequest,
    LogRefsRequest,
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
from memstream.topics.limits import LimitExceeded, check_content, check_depth, check_raw
from memstream.topics.models import MEMORY_TYPES, Edge, MemoryItem, Status, Subgraph
from memstream.topics.registry import REPLIES, REQUESTS
from memstream.topics.sealing import sealing_active, unseal
from memstream.topics.settings import LimitsSettings

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
    # the cube of a used memory found in another cube than the request's
    cube_of: dict[str, str] = field(default_factory=dict)
    request: RequestBase | None = None


def _reply_address(raw: bytes | None) -> dict[str, Any] | None:
    """Best effort: the reply fields of a payload that failed validation."""
    try:
        data = json.loads(unseal(raw or b""))  # ValidationError (erased cube) is a ValueError
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("correlation_id"), str):
        return None
    user = data.get("user_id") if isinstance(data.get("user_id"), str) and data["user_id"] \
        else "unknown"
    cube = data.get("cube_id") if isinstance(data.get("cube_id"), str) and data["cube_id"] \
        else user
    return {"user_id": user, "cube_id": cube, "correlation_id": data["correlation_id"],
            "op": data.get("op"),
            "reply_to": data.get("reply_to") if isinstance(data.get("reply_to"), str) else None,
            "reply_partition": data.get("reply_partition")
            if isinstance(data.get("reply_partition"), int) else None,
            "requester": data.get("requester") if isinstance(data.get("requester"), str)
            else "client"}


def reply_outgoing(deps: Deps, address: dict[str, Any], reply: Reply,
                   value: bytes | None = None) -> Outgoing:
    """``value``: the reply already encoded as its spec would (``_bounded``)."""
    topic = address.get("reply_to") or REPLIES.name(deps.settings)
    spec = reply_spec(address)
    return Outgoing(spec, reply, key=str(address.get("requester", "client")).encode(),
                    topic=topic, partition=address.get("reply_partition"),
                    value=value if spec is REPLIES else None)


def _error(deps: Deps, address: dict[str, Any], exc: BaseException) -> Reply:
    message = str(exc) if not isinstance(exc, ValidationError) else \
        "invalid request: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return Reply(user_id=address["user_id"], cube_id=address["cube_id"], occurred_at=deps.clock(),
                 correlation_id=address["correlation_id"], ok=False,
                 error=ErrorInfo(type=type(exc).__name__, message=message))


async def _ensure_cube(deps: Deps, cube_id: str) -> None:
    counts = await deps.query.count_by_type(cube_id, status=None)
    if not any(counts.values()):
        raise UnknownCube(f"cube {cube_id!r} has no memories")


async def _ensure_some(deps: Deps, cubes: tuple[str, ...]) -> None:
    """``UnknownCube`` when none of ``cubes`` holds a memory."""
    if len(cubes) == 1:
        await _ensure_cube(deps, cubes[0])
        return
    for cube in cubes:
        if any((await deps.query.count_by_type(cube, status=None)).values()):
            return
    raise UnknownCube(f"none of the cubes {', '.join(map(repr, cubes))} has memories")


async def _subgraph(req: SubgraphRequest, deps: Deps) -> Subgraph:
    vec = (await deps.embedder.embed_queries([req.query]))[0]
    centers = await deps.store.search(req.cube_id, VectorQuery(
        np.asarray(vec).tolist(), req.top_k, memory_types=["LongTermMemory", "UserMemory"],
        status=req.center_status))
    nodes: dict[str, MemoryItem] = {}
    edges: dict[tuple[str, str, str], Edge] = {}
    for item, _ in centers:
        sub = await deps.query.subgraph(req.cube_id, item.id, req.depth, req.center_status)
        for node in sub.nodes:
            nodes.setdefault(node.id, node)
        for edge in sub.edges:
            edges.setdefault((edge.source, edge.target, edge.type), edge)
    core = centers[0][0].id if centers else None
    return Subgraph(core_id=core, nodes=tuple(nodes.values()), edges=tuple(edges.values()))


async def _dispatch(req: RequestBase, deps: Deps, wait: WaitApplied) -> tuple[
        ReplyResult, list[MemoryItem], dict[str, str]]:
    """The result, the memories it returns (their usage is recorded) and the cube of each
    one found in a cube other than the request's."""
    match req:
        case SearchRequest():
            if req.after is not None:
                await wait(req.after, deps.settings.search.after_timeout_s)
            # without ``after`` the search promises no order with writes: its vector reads,
            # in every cube it names, need not wait for the store to apply every write
            # (sinks/freshness.py)
            with contextlib.nullcontext() if req.after is not None else relaxed_reads():
                found, mode, cube_of = await search_cubes(req, deps)
                if not found:  # only an empty answer needs to know whether the cubes exist
                    await _ensure_some(deps, req.cubes)
            # a hit's usage history stays in the store (``get`` returns it): it grows with every
            # search that returns the node, and was half of a search reply's bytes
            hits = tuple(s.model_copy(update={"item": s.item.evolve(usage=())})
                         if s.item.metadata.usage else s for s in found)
            return SearchResult(memories=hits, mode_used=mode), [s.item for s in found], {  # type: ignore[arg-type]
                i: c for i, c in cube_of.items() if c != req.cube_id}
        case SubgraphRequest():
            await _ensure_cube(deps, req.cube_id)
            return SubgraphResult(subgraph=await _subgraph(req, deps)), [], {}
        case GetRequest():
            by_id = await nodes_by_ids_or_prefixes(deps, req.cube_id, req.ids)  # or prefixes
            return NodesResult(nodes=tuple(by_id)), [], {}
        case GetAllRequest():
            await _ensure_cube(deps, req.cube_id)
            types = [req.memory_type] if req.memory_type else list(MEMORY_TYPES)
            status: Status | None = None if req.include_inactive else "activated"
            nodes, total = await page_of_types(deps, req.cube_id, types, status, req.offset,
                                               min(req.limit, deps.settings.limits.page_nodes))
            end = req.offset + len(nodes)
            more = end < total
            return NodesResult(nodes=tuple(nodes), total=total,
                               truncated=more, next_offset=end if more else None), [], {}
        case WorkingMemoryRequest():
            items = await deps.query.all_of_type(req.cube_id, "WorkingMemory")
            return NodesResult(nodes=tuple(items)), [], {}
        case LogRefsRequest():
            return await log_refs_result(req, deps), [], {}
        case DataKeyRequest():
            return data_key_result(req), [], {}
    raise ValueError(f"unsupported request {type(req).__name__}")


def _viewed(req: RequestBase, resolve: Callable[[str], str]) -> RequestBase:
    """``req`` reading the view of each cube it names that was promoted to one."""
    update: dict[str, Any] = {}
    if (view := resolve(req.cube_id)) != req.cube_id:
        update["cube_id"] = view
    if isinstance(req, SearchRequest) and req.cube_ids:
        viewed = tuple(resolve(c) for c in req.cube_ids)
        if viewed != req.cube_ids:
            update["cube_ids"] = viewed
    return req.model_copy(update=update) if update else req


def _size(reply: Reply, plain: bytes | None = None) -> int:
    """A reply's size for the limit: its JSON as the client opens it (``plain``, made here if
    not given), or the record as sent when that is larger (sealed fields)."""
    return _sized(reply, plain)[0]


def _sized(reply: Reply, plain: bytes | None = None) -> tuple[int, bytes]:
    """``_size``, and the record as sent."""
    plain = REPLIES.plain(reply) if plain is None else plain
    sent = REPLIES.encode(reply, plain)
    return max(len(plain), len(sent)), sent


def _bounded(reply: Reply, limits: LimitsSettings) -> tuple[Reply, bytes | None]:
    """The reply as it may be sent: at most ``limits.event_bytes`` (``_size``), a page cut
    again until it fits; and, when it is sent as it came, the record already encoded (a
    search's reply was encoded three times: twice here, once more to send it)."""
    json = REPLIES.plain(reply)
    if len(json) <= limits.event_bytes and not sealing_active():
        return reply, json  # sent as it is: sealed fields grow by a third and a head each
    size, sent = _sized(reply, json)
    if size <= limits.event_bytes:
        return reply, sent
    result = reply.result
    if isinstance(result, NodesResult) and result.total is not None and result.nodes:
        empty = reply.model_copy(update={"result": result.model_copy(update={"nodes": ()})})
        plain = len(reply.model_dump_json().encode())
        budget = (limits.event_bytes - _size(empty) - 64) * plain / size
        keep, used = 0, 0
        for node in result.nodes:
            used += len(node.model_dump_json().encode()) + 1
            if used > budget:
                break
            keep += 1
        while keep:
            end = (result.next_offset or result.total) - (len(result.nodes) - keep)
            page = result.model_copy(update={"nodes": result.nodes[:keep], "truncated": True,
                                             "next_offset": end})
            cut = reply.model_copy(update={"result": page})
            if _size(cut) <= limits.event_bytes:
                return cut, None
            keep = min(keep - 1, int(keep * 0.9))
    return too_large(reply, size, limits), None


def too_large(reply: Reply, size: int, limits: LimitsSettings, why: str = "") -> Reply:
    """An error reply in place of one too large to send, naming the limit."""
    error = LimitExceeded("encoded reply", size, limits.event_bytes, "event_bytes", "bytes")
    message = f"{error}{why}; ask for less (a smaller top_k, or get_all's pages)"
    log.warning("request %s: %s", reply.correlation_id, message)
    return reply.model_copy(update={"ok": False, "result": None, "error": ErrorInfo(
        type=type(error).__name__, message=message)})


def _letter(raw: RawRecord, exc: BaseException, deps: Deps) -> Outgoing:
    return dead_letter(STAGE, raw, exc, 1, deps.clock,
                        max_payload=deps.settings.limits.event_bytes // 2)


def _refused(raw: RawRecord, deps: Deps, exc: BaseException) -> Answer:
    """An invalid or oversized request: an error reply if it names where, and a dead letter."""
    try:
        address = _reply_address(raw.value)
    except RecursionError:  # a depth-checked payload never gets here; never crash the lane
        address = None
    if address is None:
        log.warning("dead-lettering request %s[%d]@%d: %s", raw.topic, raw.partition,
                    raw.offset, exc)
        return Answer([_letter(raw, exc, deps)])
    log.info("refused request %s: %s", address["correlation_id"], exc)
    return Answer([reply_outgoing(deps, address, _error(deps, address, exc)),
                   _letter(raw, exc, deps)])


async def answer(raw: RawRecord, deps: Deps, wait: WaitApplied) -> Answer:
    """The reply (or dead letter) for one raw request record."""
    limits = deps.settings.limits
    value = raw.value or b""
    try:
        check_depth(value, limits, "request")  # before anything parses it
    except LimitExceeded as exc:  # too deep to read a reply address from: dead letter
        log.warning("dead-lettering request %s[%d]@%d: %s", raw.topic, raw.partition,
                    raw.offset, exc)
        return Answer([_letter(raw, exc, deps)])
    try:
        check_raw(value, limits, "request")
        opened = unseal(value)  # compressed (or sealed): the limit is on what it opens to
        check_raw(opened if isinstance(opened, bytes) else opened.encode(), limits, "request")
        req = REQUESTS.validate(opened)
    except (ValidationError, LimitExceeded, RecursionError) as exc:
        return _refused(raw, deps, exc)
    assert isinstance(req, RequestBase)  # noqa: S101
    address = {"user_id": req.user_id, "cube_id": req.cube_id,
               "correlation_id": req.correlation_id, "reply_to": req.reply_to,
               "reply_partition": req.reply_partition, "requester": req.requester,
               "op": getattr(req, "op", None)}
    metering.enter(STAGE, req.cube_id)  # this request's task: LLM calls are the cube's
    try:
        check_content(req, limits)
        verify_record(deps.verifier, raw, req)  # who asks, before what they may read
        if not isinstance(req, LogRefsRequest):  # positions and ids only: no text to guard
            for cube in req.cubes if isinstance(req, SearchRequest) else (req.cube_id,):
                await check_read(deps, req.user_id, cube)  # the cube asked for, not its view
        # a data key opens the records that name the cube asked for, not those of its view
        if deps.views is not None and not isinstance(req, LogRefsRequest | DataKeyRequest):
            req = _viewed(req, deps.views.resolve)
        req = degrade(req, deps)
        started = time.perf_counter()
        result, used, cube_of = await _dispatch(req, deps, wait)
        if isinstance(result, SearchResult) and deps.ops is not None:
            deps.ops.search(result.mode_used, time.perf_counter() - started)
    except SignatureRefused as exc:  # an error reply, and a dead letter for the operator
        log.warning("refused request %s[%d]@%d: %s", raw.topic, raw.partition, raw.offset, exc)
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc)),
                       _letter(raw, exc, deps)])
    except (UnknownCube, NoDataKey, ValueError, TimeoutError, AccessDenied) as exc:
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc))], request=req)
    except Exception as exc:  # noqa: BLE001 - a failing request still gets an answer
        log.exception("request %s failed", req.correlation_id)
        return Answer([reply_outgoing(deps, address, _error(deps, address, exc))], request=req)
    reply = Reply(user_id=req.user_id, cube_id=req.cube_id, occurred_at=deps.clock(),
                  correlation_id=req.correlation_id, ok=True, result=result)
    encoded: bytes | None = None
    if not isinstance(req, DataKeyRequest):  # a wrapped key is small, and never sealed
        reply, encoded = _bounded(reply, limits)
    return Answer([reply_outgoing(deps, address, reply, encoded)], used if reply.ok else [],
                  cube_of, req)

"""Extraction stage (MemReader): conversation chunks → candidate memories.

Pure async logic. Ids are deterministic (cube + source messages or doc chunk +
item index), so extracting the same chunk twice yields the same items.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from memstream.streams.extraction.chunking import chunk_text
from memstream.streams.prompts.extraction import (
    EXTRACTION,
    ExtractionContext,
    ExtractionMessage,
    ExtractionResponse,
)
from memstream.streams.runtime.stage import Deps, Outgoing, Record
from memstream.streams.text.words import tags_for
from memstream.topics.events import ConversationChunk, ExtractedMemory, Message, Origin
from memstream.topics.ids import chunk_source_key, derived_event_id, episode_id, memory_id
from memstream.topics.models import SourceRef, parse_iso_time
from memstream.topics.registry import MEMORY_ITEMS

log = logging.getLogger("memstream.extraction")
STAGE = "extraction"


def _parse_time(value: str | None) -> datetime | None:
    """An event time from the model, kept only when it is a valid date or datetime."""
    if not value:
        return None
    try:
        return parse_iso_time(value, naive_as_utc=True)
    except ValueError:
        return None


def said_at(said: dict[str, datetime], message_ids: Sequence[str]) -> datetime | None:
    """When a memory was said: the latest of its source messages (any of the chunk's when
    the answer named none it has); None for a document."""
    times = [said[i] for i in message_ids if i in said] or list(said.values())
    return max(times, default=None)


async def extract_chunk(
    chunk: ConversationChunk, origin: Origin | None, deps: Deps
) -> list[ExtractedMemory]:
    """All candidate memories of one chunk (a chat chunk, or every piece of a document)."""
    match chunk.kind:
        case "chat":
            return await _extract_chat(chunk, origin, deps)
        case "doc":
            return await _extract_doc(chunk, origin, deps)


async def _extract_chat(
    chunk: ConversationChunk, origin: Origin | None, deps: Deps
) -> list[ExtractedMemory]:
    ctx = ExtractionContext(
        kind="chat",
        user_id=chunk.user_id,
        session_id=chunk.session_id,
        now=deps.clock(),
        messages=[
            ExtractionMessage(id=m.id, role=m.role, content=m.content, timestamp=m.timestamp,
                              name=m.name)
            for m in chunk.messages
        ],
    )
    answer = await deps.llm.run(EXTRACTION, ctx)
    roles = {m.id: m.role for m in chunk.messages}
    default_refs = tuple(
        SourceRef(kind="message", message_id=m.id, role=m.role)
        for m in chunk.messages if m.role == "user"
    ) or tuple(SourceRef(kind="message", message_id=m.id, role=m.role) for m in chunk.messages)
    source_key = chunk_source_key(chunk.session_id,
                                  ((m.id, m.role, m.content) for m in chunk.messages))

    def refs_for(ids: Sequence[str]) -> tuple[SourceRef, ...]:
        known = [i for i in dict.fromkeys(ids) if i in roles]
        if not known:
            return default_refs
        return tuple(SourceRef(kind="message", message_id=i, role=roles[i]) for i in known)

    items = _to_items(chunk, origin, answer, source_key, "conversation", refs_for,
                      deps.settings.limits.memory_chars)
    if not deps.settings.memory.episodes:
        return items
    episode = _episode(chunk, origin, source_key)
    link = SourceRef(kind="memory", memory_id=episode.id)
    return [episode, *(i.model_copy(update={"sources": (*i.sources, link)}) for i in items)]


def _origin_ref(origin: Origin | None) -> tuple[SourceRef, ...]:
    """The chunk's position in the log, as a source reference (none without one)."""
    if origin is None:
        return ()
    return (SourceRef(kind="message", topic=origin.topic, partition=origin.partition,
                      offset=origin.offset),)


def speaker_of(message: Message) -> str:
    """Who said it: the message's name, else its role."""
    return (message.name or "").strip() or message.role.capitalize()


def episode_text(messages: Sequence[Message]) -> str:
    """The turns as they were said, one per line, each with its absolute time and speaker."""
    return "\n".join(
        f"[{m.timestamp:%Y-%m-%d %H:%M}] {speaker_of(m)}: {' '.join(m.content.split())}"
        for m in messages)


def _episode(chunk: ConversationChunk, origin: Origin | None, source_key: str) -> ExtractedMemory:
    """The chunk kept whole as one episodic memory (MemOS's fast add, Graphiti's episodes):
    searchable by its own words, linked to what was extracted from it."""
    node_id = episode_id(chunk.cube_id, source_key)
    origin_ref = _origin_ref(origin)
    first = chunk.messages[0].timestamp
    speakers = list(dict.fromkeys(speaker_of(m) for m in chunk.messages))
    return ExtractedMemory(
        event_id=derived_event_id("episode", node_id),
        user_id=chunk.user_id,
        cube_id=chunk.cube_id,
        occurred_at=chunk.occurred_at,
        id=node_id,
        session_id=chunk.session_id,
        memory=episode_text(chunk.messages),
        key=f"{', '.join(speakers)} · {first:%Y-%m-%d %H:%M}",
        memory_type="EpisodicMemory",
        type="event",
        # the people named in it (a bare role such as "User" says nothing) and its main words
        tags=tuple(dict.fromkeys([
            *(m.name.strip() for m in chunk.messages if m.name and m.name.strip()),
            *tags_for(" ".join(m.content for m in chunk.messages))])),
        source="conversation",
        sources=(*(SourceRef(kind="message", message_id=m.id, role=m.role)
                   for m in chunk.messages), *origin_ref),
        memory_time=first,
        valid_from=first,
        origin=origin,
        chunk_event_id=chunk.event_id,
        index=0,
        count=1,
    )


async def _extract_doc(
    chunk: ConversationChunk, origin: Origin | None, deps: Deps
) -> list[ExtractedMemory]:
    doc = chunk.document
    assert doc is not None  # noqa: S101 - the model validator guarantees it
    cfg = deps.settings.worker
    items: list[ExtractedMemory] = []
    pieces = chunk_text(doc.text, cfg.doc_chunk_chars, cfg.doc_chunk_overlap)
    for piece in pieces:
        ctx = ExtractionContext(
            kind="doc",
            user_id=chunk.user_id,
            session_id=chunk.session_id,
            now=deps.clock(),
            document_text=piece.text,
            doc_id=doc.doc_id,
            doc_title=doc.title,
            chunk_index=piece.index,
            char_start=piece.start,
            char_end=piece.end,
        )
        answer = await deps.llm.run(EXTRACTION, ctx)
        ref = SourceRef(kind="chunk", doc_id=doc.doc_id, chunk_index=piece.index,
                        char_start=piece.start, char_end=piece.end)

        def chunk_ref(_ids: Sequence[str], r: SourceRef = ref) -> tuple[SourceRef, ...]:
            return (r,)

        items.extend(_to_items(chunk, origin, answer, f"doc:{doc.doc_id}:{piece.index}", "file",
                               chunk_ref, deps.settings.limits.memory_chars))
    # Re-number across pieces so index/count describe the whole document.
    return [i.model_copy(update={"index": n, "count": len(items)}) for n, i in enumerate(items)]


def _to_items(
    chunk: ConversationChunk,
    origin: Origin | None,
    answer: ExtractionResponse,
    source_key: str,
    source: str,
    refs_for: Callable[[Sequence[str]], tuple[SourceRef, ...]],
    max_chars: int,
) -> list[ExtractedMemory]:
    items: list[ExtractedMemory] = []
    seen: set[str] = set()
    said = {m.id: m.timestamp for m in chunk.messages}
    for extracted in answer.memories:
        # cut to the memory limit: the add stage refuses longer memories
        text = extracted.value.strip()[:max_chars].strip()
        if not text or text in seen:
            continue
        seen.add(text)
        index = len(items)
        node_id = memory_id(chunk.cube_id, source_key, index)
        origin_ref = _origin_ref(origin)
        refs = refs_for(extracted.source_message_ids)
        items.append(ExtractedMemory(
            event_id=derived_event_id("extracted", node_id),
            user_id=chunk.user_id,
            cube_id=chunk.cube_id,
            occurred_at=chunk.occurred_at,
            id=node_id,
            session_id=chunk.session_id,
            memory=text,
            key=extracted.key.strip(),
            memory_type=extracted.memory_type,
            type=extracted.type,
            tags=tuple(dict.fromkeys(t.strip() for t in extracted.tags if t.strip())),
            background=answer.summary.strip(),
            source=source,  # type: ignore[arg-type]
            sources=(*refs, *origin_ref),
            memory_time=(when := _parse_time(extracted.memory_time)),
            valid_from=when or said_at(said, extracted.source_message_ids),
            origin=origin,
            chunk_event_id=chunk.event_id,
            index=index,
        ))
    return [i.model_copy(update={"count": len(items)}) for i in items]


async def extract(records: Sequence[Record[ConversationChunk]], deps: Deps) -> list[Outgoing]:
    """Extraction for a batch of one cube's chunks: asked at once (no chunk's extraction waits
    on another's), emitted in log order."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(extract_chunk(r.value, r.origin, deps)) for r in records]
    except ExceptionGroup as failed:  # the first failure, as a sequential run would raise it
        raise failed.exceptions[0] from None
    out: list[Outgoing] = []
    for record, task in zip(records, tasks, strict=True):
        items = task.result()
        if deps.ops is not None and record.value.kind == "chat":
            deps.ops.turns_ingested(len(record.value.messages))
        if not items:
            log.info("cube %s: chunk %s yielded no memories", record.value.cube_id,
                     record.value.event_id)
        out.extend(Outgoing(MEMORY_ITEMS, item) for item in items)
    return out

"""History, time travel and provenance, read from the log.

Every change of a memory is a ``memory.updates`` event with a snapshot of the node after
it, so the log alone answers "how did this memory change" (``memory_history``), "what did
the cube hold at time T" (``cube_as_of``: the snapshots folded in log order up to T) and
"why does it believe this" (``explain``: the messages it was extracted from, with their
text, the merges and inferences that led to it, the members of a summary, the memory a
working-memory copy copies: ``derived.py``). The fold and the explanation are
pure functions of the records; ``memstream/history/indexed.py`` fetches the records they need
through the provenance index, and ``read_log`` reads whole topics (backups list cubes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.archive.reading import archived, seek_past_archive
from memstream.history.derived import COPY_NAMING, as_copy, member_of, premise_of
from memstream.history.snapshots import is_slim, restore
from memstream.kafka.compat import mark_latency_sensitive
from memstream.topics.events import (
    ConversationChunk,
    Event,
    ExtractedMemory,
    MemoryUpdate,
    Message,
)
from memstream.topics.models import MemoryItem
from memstream.topics.registry import (
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    REORGANIZE_HIGH,
    REORGANIZE_LOW,
    REORGANIZE_NORMAL,
    SCHEDULE_ADD,
    WORKING_MEMORY,
    TopicSpec,
)

if TYPE_CHECKING:
    from memstream.client.client import MemoryClient

log = logging.getLogger("memstream.provenance")

# Where the event behind an update (its ``cause_event_id``) may be found.
CAUSE_TOPICS: tuple[TopicSpec, ...] = (
    MEMORY_ITEMS, MEMORY_COMMANDS, REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW,
    SCHEDULE_ADD, WORKING_MEMORY,
)
# Updates whose snapshot is the node's state after the change.
_SNAPSHOT_ACTIONS = frozenset({"added", "merged", "updated", "archived", "expired", "frozen",
                               "unfrozen", "feedback", "superseded"})
_DROP_ACTIONS = frozenset({"removed", "deleted"})
MAX_DEPTH = 8  # lineage followed at most this deep (merges of merges of …)


class NodeNotFound(LookupError):
    """No update in the log names this node."""


@dataclass(frozen=True)
class Change:
    """One change of a memory: the update, and the event that caused it when the log has it."""

    update: MemoryUpdate
    cause: Event | None = None
    cause_topic: str | None = None


@dataclass(frozen=True)
class SourceText:
    """A message (or a document excerpt) a memory came from, with its text from the log."""

    kind: Literal["message", "document", "manual"]
    text: str
    message_id: str | None = None
    role: str | None = None
    name: str | None = None
    timestamp: datetime | None = None
    session_id: str | None = None
    event_id: str | None = None  # the conversation chunk or memory.items event


@dataclass(frozen=True)
class Lineage:
    """A node this one came from: merged into it, a premise it was inferred from, the episode
    it was said in, a member it summarizes, or the memory it is a working-memory copy of."""

    kind: Literal["merged", "inferred", "episode", "member", "copy"]
    reason: str
    at: datetime | None
    source: Explanation


@dataclass(frozen=True)
class Explanation:
    node_id: str
    node: MemoryItem | None  # latest snapshot in the log
    sources: tuple[SourceText, ...] = ()
    lineage: tuple[Lineage, ...] = ()
    changes: tuple[Change, ...] = field(default=(), repr=False)
    copy_of: str | None = None  # a working-memory copy: the memory it copies

    @property
    def made(self) -> Change | None:
        """The change that made the node (its ``added``): which stage, why, when."""
        return next((c for c in self.changes if c.update.action == "added"
                     and c.update.node_id == self.node_id), None)

    @property
    def feedback(self) -> Change | None:
        """The agent's last verdict on it (its newest ``feedback`` change; the reason says
        which verdict and why)."""
        return next((c for c in reversed(self.changes) if c.update.action == "feedback"
                     and c.update.node_id == self.node_id), None)


class History(list[Change]):
    """A memory's changes, oldest first. For a working-memory copy, ``copy_of`` names the
    memory it copies, and the changes are the copy's and that memory's."""

    def __init__(self, changes: Iterable[Change], node_id: str,
                 copy_of: str | None = None) -> None:
        super().__init__(changes)
        self.node_id = node_id  # the full id (a prefix was asked for)
        self.copy_of = copy_of


def dedupe(updates: Iterable[MemoryUpdate]) -> list[MemoryUpdate]:
    """First occurrence of each event id: a redelivered stage re-announces under the same id."""
    seen: set[str] = set()
    out = []
    for u in updates:
        if u.event_id not in seen:
            seen.add(u.event_id)
            out.append(u)
    return out


def _touches(update: MemoryUpdate, node_id: str) -> bool:
    if update.node_id == node_id:
        return True
    if update.action in ("merged", "refused") and node_id in update.related_ids:
        return True
    if update.action in COPY_NAMING and node_id in update.related_ids:
        return True  # a working-memory copy: made with its memory, or put in working memory
    if node_id in update.removed_ids:
        return True
    return any(node_id in (e.source, e.target) for e in update.edges)


def node_changes(updates: Sequence[MemoryUpdate], node_id: str,
                 *more: str) -> list[MemoryUpdate]:
    """The updates that changed ``node_id`` (or any of ``more``): its own, merges that
    archived it, edges to it, and a cube erasure after it existed; in log order."""
    out: list[MemoryUpdate] = []
    ids = (node_id, *more)
    for u in dedupe(updates):
        if any(_touches(u, i) for i in ids) or (
                out and u.node_id is None and u.action == "deleted"):
            out.append(u)
    return out


def fold(updates: Iterable[MemoryUpdate], at: datetime | None = None) -> dict[str, MemoryItem]:
    """The cube's memories (working-memory copies aside) after the updates that occurred at or
    before ``at``, applied in log order. An ``added`` without its snapshot counts once
    ``with_snapshots`` has put it back (``live_ids`` counts it without)."""
    state: dict[str, MemoryItem] = {}
    for u in dedupe(updates):
        if at is not None and u.occurred_at > at:
            continue
        if u.action in _SNAPSHOT_ACTIONS and u.node is not None:
            if u.node.metadata.memory_type != "WorkingMemory":
                state[u.node.id] = u.node
        elif u.action in _DROP_ACTIONS:
            if u.node_id is None and not u.removed_ids:
                state.clear()  # the cube was erased
            elif u.node_id is not None:
                state.pop(u.node_id, None)
        for gone in u.removed_ids:
            state.pop(gone, None)
    return state


def live_ids(updates: Iterable[MemoryUpdate]) -> set[str]:
    """The ids ``fold`` would hold, snapshots or not (whether a cube holds memories)."""
    state: set[str] = set()
    for u in dedupe(updates):
        node_type = u.node.metadata.memory_type if u.node is not None else u.memory_type
        if u.action in _SNAPSHOT_ACTIONS and u.node_id is not None and node_type is not None:
            if node_type != "WorkingMemory":
                state.add(u.node_id)
        elif u.action in _DROP_ACTIONS:
            if u.node_id is None and not u.removed_ids:
                state.clear()
            else:
                state.discard(u.node_id or "")
        state.difference_update(u.removed_ids)
    return state


def with_snapshots(updates: Iterable[MemoryUpdate],
                   events: Mapping[str, tuple[str, Event]]) -> list[MemoryUpdate]:
    """``updates`` with the snapshots version 3 leaves out of ``added`` put back from the
    items that caused them (``events``: event id -> (topic, event), as ``CubeLog`` holds)."""
    return [restore(u, found[1]) if is_slim(u) and (found := events.get(
        u.cause_event_id or "")) is not None else u for u in updates]


def latest_snapshot(updates: Sequence[MemoryUpdate], node_id: str) -> MemoryItem | None:
    node = None
    for u in updates:
        if u.node is not None and u.node.id == node_id and u.action in _SNAPSHOT_ACTIONS:
            node = u.node
    return node


@dataclass
class CubeLog:
    """What the log holds for one cube, indexed for provenance."""

    updates: list[MemoryUpdate]
    events: dict[str, tuple[str, Event]] = field(default_factory=dict)  # event id -> (topic, e)
    chunks: dict[str, ConversationChunk] = field(default_factory=dict)

    def cause(self, update: MemoryUpdate) -> tuple[str, Event] | None:
        return self.events.get(update.cause_event_id or "")


def explain_node(log: CubeLog, node_id: str, depth: int = 0,
                 seen: frozenset[str] = frozenset()) -> Explanation:
    """Sources (message text from the log) and lineage (merges, premises, members, the
    episode) of ``node_id``."""
    updates = dedupe(log.updates)
    own = node_changes(updates, node_id)
    node = latest_snapshot(updates, node_id)
    if not own and node is None:
        raise NodeNotFound(f"no memory {node_id} in the log of this cube")
    seen = seen | {node_id}
    sources: list[SourceText] = []
    lineage: list[Lineage] = []
    members: dict[str, tuple[str, MemoryUpdate]] = {}  # a summary's: the edge that says so
    # the items that wrote this node (an archival's cause is the item that superseded it)
    items = [c[1] for u in own if u.node_id == node_id and u.action in ("added", "merged")
             and (c := log.cause(u)) is not None and isinstance(c[1], ExtractedMemory)]
    for item in items:
        sources += _item_sources(log, item)
    if not items and node is not None:
        sources += _ref_sources(log, node, None)
    for u in own:
        if depth >= MAX_DEPTH:
            break
        if u.action == "merged" and u.node_id == node_id:
            for other in u.related_ids:
                if other not in seen:
                    lineage.append(Lineage("merged", u.reason, u.occurred_at,
                                           _explain_or_stub(log, other, depth, seen)))
        for edge in u.edges:
            if (premise := premise_of(edge, node_id)) is not None and premise not in seen:
                lineage.append(Lineage("inferred", u.reason or "inferred", u.occurred_at,
                                       _explain_or_stub(log, premise, depth, seen)))
            elif (member := member_of(edge, node_id)) is not None and member not in seen:
                members.setdefault(member, (edge.type, u))  # a later run names it again
    for member, (edge_type, u) in members.items() if depth < MAX_DEPTH else ():
        why = f"{edge_type} edge by the {u.stage} stage" + (f": {u.reason}" if u.reason else "")
        lineage.append(Lineage("member", why, u.occurred_at,
                               _explain_or_stub(log, member, depth, seen)))
    if node is not None and depth < MAX_DEPTH:
        for ref in node.metadata.sources:
            if ref.kind == "memory" and ref.memory_id and ref.memory_id not in seen:
                lineage.append(Lineage("episode", "extracted from this episode", None,
                                       _explain_or_stub(log, ref.memory_id, depth, seen)))
    return Explanation(node_id, node, tuple(dict.fromkeys(sources)), tuple(lineage),
                       tuple(changes_with_causes(log, own)))


def explain_copy(log: CubeLog, node_id: str, origin: str) -> Explanation:
    """A working-memory copy: the memory it copies, explained, as its one lineage step."""
    source = explain_node(log, origin, 1, frozenset({node_id}))
    own = node_changes(dedupe(log.updates), node_id)
    at = own[0].occurred_at if own else None
    node = as_copy(source.node, node_id) if source.node is not None else None
    return Explanation(node_id, node, (), (Lineage("copy", "working-memory copy", at, source),),
                       tuple(changes_with_causes(log, own)), copy_of=origin)


def _explain_or_stub(log: CubeLog, node_id: str, depth: int, seen: frozenset[str]) -> Explanation:
    try:
        return explain_node(log, node_id, depth + 1, seen)
    except NodeNotFound:
        return Explanation(node_id, None)


def _item_sources(log: CubeLog, item: ExtractedMemory) -> list[SourceText]:
    chunk = log.chunks.get(item.chunk_event_id or "")
    found = _ref_sources(log, None, chunk, item)
    if found:
        return found
    if any(ref.kind == "manual" for ref in item.sources) or chunk is None:
        return [SourceText("manual", item.memory, event_id=item.event_id)]
    return found


def _ref_sources(log: CubeLog, node: MemoryItem | None, chunk: ConversationChunk | None,
                 item: ExtractedMemory | None = None) -> list[SourceText]:
    """Messages and document excerpts named by the refs, looked up in the item's own chunk
    first (message ids such as "m0" repeat across chunks), then anywhere in the cube."""
    refs = item.sources if item is not None else node.metadata.sources if node else ()
    out: list[SourceText] = []
    for ref in refs:
        if ref.kind == "message" and ref.message_id:
            found = _message(chunk, ref.message_id) if chunk else None
            if found is None:
                found = next((hit for c in log.chunks.values()
                              if (hit := _message(c, ref.message_id)) is not None), None)
            if found is not None:
                msg, owner = found
                out.append(SourceText("message", msg.content, msg.id, msg.role, msg.name,
                                      msg.timestamp, owner.session_id, owner.event_id))
        elif ref.kind == "chunk" and ref.doc_id:
            doc_chunk = chunk if chunk is not None and chunk.document is not None and \
                chunk.document.doc_id == ref.doc_id else next(
                    (c for c in log.chunks.values()
                     if c.document is not None and c.document.doc_id == ref.doc_id), None)
            if doc_chunk is not None and doc_chunk.document is not None:
                text = doc_chunk.document.text
                start, end = ref.char_start or 0, ref.char_end or len(text)
                out.append(SourceText("document", text[start:end], event_id=doc_chunk.event_id,
                                      session_id=doc_chunk.session_id))
    return out


def _message(chunk: ConversationChunk, message_id: str) -> tuple[Message, ConversationChunk] | None:
    for m in chunk.messages:
        if m.id == message_id:
            return m, chunk
    return None


def changes_with_causes(log: CubeLog, updates: Sequence[MemoryUpdate]) -> list[Change]:
    out = []
    for u in updates:
        found = log.cause(u)
        out.append(Change(u, found[1], found[0]) if found else Change(u))
    return out


# ------------------------------------------------------------------------- reading the log


async def read_log(client: MemoryClient, specs: Sequence[TopicSpec], cube_id: str | None,
                   keep: Callable[[bytes], bool] | None = None) -> dict[str, list[Event]]:
    """Every record of ``specs`` up to their current ends, per topic suffix in partition order,
    with one consumer. Parsing is what costs (~80 µs a record), so records are skipped before
    it: another cube's by their key (records are keyed by cube; one keyed otherwise is parsed
    and checked), and those whose raw bytes ``keep`` rejects. A record that does not decode
    is skipped with a warning."""
    names = {spec.name(client.settings): spec for spec in specs}
    out: dict[str, list[Event]] = {spec.suffix: [] for spec in specs}
    key = cube_id.encode() if cube_id is not None else None
    consumer = AIOKafkaConsumer(bootstrap_servers=client.bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    mark_latency_sensitive(consumer)  # a caller waits for the answer
    try:
        await consumer.topics()  # refreshes metadata
        tps = [TopicPartition(name, p) for name in names
               for p in sorted(consumer.partitions_for_topic(name) or ())]
        if not tps:
            return out
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)

        def take(tp: TopicPartition, record: Any) -> None:
            spec = names[tp.topic]
            if key is not None and record.key is not None and record.key != key:
                return
            if keep is not None and not keep(record.value or b""):
                return
            try:
                event = spec.decode(record.value or b"")
            except ValidationError as exc:
                log.warning("skipping undecodable %s record at %d: %s", tp.topic,
                            record.offset, exc)
                return
            if isinstance(event, Event) and (cube_id is None or event.cube_id == cube_id):
                out[spec.suffix].append(event)

        for tp in tps:  # the archived records first, then the broker's (one log)
            for record in archived(client.settings, tp, key=key):
                take(tp, record)
        at = await seek_past_archive(consumer, client.settings, tps)
        remaining = {tp for tp in tps if ends[tp] > at[tp]}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    take(tp, record)
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return out


async def read_updates(client: MemoryClient, cube_id: str | None) -> list[MemoryUpdate]:
    found = (await read_log(client, [MEMORY_UPDATES], cube_id))[MEMORY_UPDATES.suffix]
    return [u for u in found if isinstance(u, MemoryUpdate)]

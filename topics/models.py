"""Domain models shared by the contract, the stages and the stores.

A memory node is a ``MemoryItem``: an id, the text, and metadata. The
embedding lives in the vector store, never on the node.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from memstream.topics.sealing import SEALED

MemoryType = Literal["WorkingMemory", "LongTermMemory", "UserMemory", "EpisodicMemory"]
# What extraction files a memory under (the model chooses between these two).
StoredMemoryType = Literal["LongTermMemory", "UserMemory"]
STORED_MEMORY_TYPES: tuple[StoredMemoryType, ...] = get_args(StoredMemoryType)
# What the add stage stores: extracted memories, and episodes (a chat chunk's raw turns,
# kept whole; never merged, never in working memory, never reorganized).
ItemMemoryType = Literal["LongTermMemory", "UserMemory", "EpisodicMemory"]
SearchMemoryType = Literal["All", "WorkingMemory", "LongTermMemory", "UserMemory", "EpisodicMemory"]
MEMORY_TYPES: tuple[MemoryType, ...] = (
    "WorkingMemory", "LongTermMemory", "UserMemory", "EpisodicMemory")
Status = Literal["generated", "activated", "archived", "expired", "deleted"]
NodeType = Literal["fact", "event", "opinion", "topic", "reasoning", "procedure"]
HierarchyLevel = Literal["topic", "concept", "fact"]
SourceKind = Literal["conversation", "retrieved", "web", "file"]
Visibility = Literal["private", "public", "session"]
# What an agent said about a memory (``Feedback`` on ``memory.commands``): ``wrong`` is never
# returned again (kept for history), ``outdated`` closes its validity, ``irrelevant`` demotes
# it for queries like the one it was returned for, ``confirmed`` is never closed automatically.
Verdict = Literal["wrong", "outdated", "irrelevant", "confirmed"]
VERDICTS: tuple[Verdict, ...] = ("wrong", "outdated", "irrelevant", "confirmed")
EdgeType = Literal[
    "PARENT",
    "RELATE_TO",
    "MERGED_TO",
    "CAUSE",
    "CONDITION",
    "CONFLICT",
    "FOLLOWS",
    "AGGREGATE_TO",
    "INFERRED_FROM",
    "EXTRACTED_FROM",
    "SUPERSEDES",
]
EDGE_TYPES: tuple[EdgeType, ...] = get_args(EdgeType)
# Lineage edges record where a node came from; they stay put when nodes merge.
# EXTRACTED_FROM: an extracted memory -> the episode (chat chunk) it was extracted from.
# (SUPERSEDES, from a statement that ends or replaces an earlier one to that one, moves with
# a merge like RELATE_TO: the merged node says what the statement said.)
LINEAGE_EDGE_TYPES: frozenset[EdgeType] = frozenset(
    {"MERGED_TO", "INFERRED_FROM", "PARENT", "EXTRACTED_FROM"})

MAX_ID_LEN = 256


def utcnow() -> datetime:
    """The default clock; stages take a ``Clock`` so tests can inject time."""
    return datetime.now(UTC)


def parse_iso_time(text: str, *, naive_as_utc: bool) -> datetime:
    """An ISO-8601 date or time ("Z" allowed) as an aware datetime. A value without a
    timezone is taken as UTC when ``naive_as_utc``, else refused; ``ValueError`` otherwise."""
    parsed = datetime.fromisoformat(text.strip())
    if parsed.tzinfo is None:
        if not naive_as_utc:
            raise ValueError(f"{text!r} has no timezone")
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _check_identifier(value: str) -> str:
    if not value or not value.strip():
        raise ValueError("must be a non-empty string")
    if len(value) > MAX_ID_LEN:
        raise ValueError(f"must be at most {MAX_ID_LEN} characters")
    if any(ord(ch) < 32 for ch in value):
        raise ValueError("must not contain control characters")
    return value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceRef(Frozen):
    """Provenance: the message or document chunk a memory came from."""

    kind: Literal["message", "chunk", "memory", "manual"] = "message"
    message_id: str | None = None
    memory_id: str | None = None  # kind "memory": the memory (e.g. the episode) it came from
    role: str | None = None
    doc_id: str | None = None
    chunk_index: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


class UsageRecord(Frozen):
    """One search that returned a node."""

    at: AwareDatetime
    requester: str
    query: Annotated[str | None, SEALED] = None


class MemoryDescription(Frozen):
    """What a memory says about itself, the same on an extracted item (``memory.items``) and
    on the stored node's metadata: declared once, so the two cannot drift apart."""

    session_id: str | None = None
    type: NodeType = "fact"
    key: Annotated[str, SEALED] = ""
    tags: Annotated[tuple[str, ...], SEALED] = ()
    entities: Annotated[tuple[str, ...], SEALED] = ()
    hierarchy_level: HierarchyLevel = "fact"
    background: Annotated[str, SEALED] = ""
    source: SourceKind = "conversation"
    sources: tuple[SourceRef, ...] = ()
    confidence: float = Field(default=80.0, ge=0, le=100)
    visibility: Visibility = "private"
    memory_time: AwareDatetime | None = None
    # Since when it holds, in the conversation's time (the event's date when one was said,
    # else when it was said); None: not known (documents, data written before validity).
    valid_from: AwareDatetime | None = None

    def description(self) -> dict[str, Any]:
        """These fields by name (values as they are, not serialised), to build the other."""
        return {name: getattr(self, name) for name in MemoryDescription.model_fields}


class MemoryMetadata(MemoryDescription):
    user_id: str
    cube_id: str
    memory_type: MemoryType
    status: Status = "activated"
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)
    usage: tuple[UsageRecord, ...] = ()
    frozen: bool = False
    # For WorkingMemory copies: the long-term node this copy mirrors.
    origin_id: str | None = None
    # Who wrote a derived node's text (summary, concept, inference): a language model or the
    # deterministic ``rules`` stand-in. None: not recorded (facts, data written before).
    written_by: Literal["model", "rules"] | None = None
    # Until when it held, in the conversation's time: closed by a later statement that ends
    # or replaces it (a ``SUPERSEDES`` edge from that one) or by ``outdated`` feedback.
    # None: still holds. ``superseded_by``: the statement that closed it, if one did.
    valid_until: AwareDatetime | None = None
    superseded_by: str | None = None
    # The agent's last verdict on it (``Verdict``), and the queries it was called irrelevant
    # for (newest last, bounded).
    feedback: Verdict | None = None
    irrelevant_for: Annotated[tuple[str, ...], SEALED] = ()

    _ids = field_validator("user_id", "cube_id")(_check_identifier)

    @field_validator("created_at", "updated_at", "memory_time", "valid_from", "valid_until")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def valid_at(self, at: datetime) -> bool:
        """Whether it held at ``at`` (conversation time): not yet closed then, and begun
        (a memory whose start is not known is taken to hold from the start)."""
        if self.valid_until is not None and self.valid_until <= at:
            return False
        return self.valid_from is None or self.valid_from <= at

    @property
    def is_derived(self) -> bool:
        """A summary (topic/concept), aggregate concept or inference, not a stated memory."""
        return self.hierarchy_level != "fact" or self.type in ("topic", "reasoning")

    @property
    def is_stand_in_summary(self) -> bool:
        """A derived node the ``rules`` stand-in wrote: kept out of working memory, where an
        agent would read it as if a model had summarised the user."""
        return self.is_derived and self.written_by == "rules"


_LINE_TIME = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d\] ", re.MULTILINE)


class MemoryItem(Frozen):
    """A memory node."""

    id: str
    memory: Annotated[str, SEALED] = Field(min_length=1)
    metadata: MemoryMetadata

    def evolve(self, **metadata_changes: Any) -> MemoryItem:
        """A copy with some metadata fields changed (models are frozen)."""
        metadata = self.metadata.model_copy(update=metadata_changes)
        return self.model_copy(update={"metadata": metadata})

    @property
    def embedding_text(self) -> str:
        """What its vector is computed from (``streams.embed.nodes.node_vectors``, which every
        path that embeds a node goes through): its memory, but an episode without the
        time at the head of each line (``[2025-05-08 13:56] ``, ``extraction.episode_text``).
        The times stay in the text, shown and searched by words; to the dense model they
        were a sixth of an episode's tokens and said nothing about what was said (the dev
        split's recall held without them: docs/benchmarks.md), and the episodes are ~40% of
        what ingestion embeds."""
        if self.metadata.memory_type != "EpisodicMemory":
            return self.memory
        return _LINE_TIME.sub("", self.memory) or self.memory


class Edge(Frozen):
    """A typed, directed relation between two nodes of one cube."""

    source: str
    target: str
    type: EdgeType
    weight: float = 1.0
    reason: Annotated[str, SEALED] = ""


class Subgraph(Frozen):
    core_id: str | None
    nodes: tuple[MemoryItem, ...] = ()
    edges: tuple[Edge, ...] = ()


class CubeGraph(Frozen):
    """Everything a cube holds, as exported by ``memstream dump``."""

    cube_id: str
    nodes: tuple[MemoryItem, ...] = ()
    edges: tuple[Edge, ...] = ()
    vectors: dict[str, list[float]] = Field(default_factory=dict)
    # who owned the cube when it was dumped: a restore writes the cube as that user
    owner: str | None = None

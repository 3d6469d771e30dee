"""Event models of the public topic contract.

Every value is a frozen, versioned pydantic model carrying ``event_id``,
``user_id``, ``cube_id`` (defaults to the user id), ``occurred_at`` (UTC) and
``schema_version``. Unions are discriminated so a consumer gets one precise
pydantic error when a payload is wrong.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
    model_validator,
)

from memstream.topics.models import (
    Edge,
    ItemMemoryType,
    MemoryDescription,
    MemoryItem,
    MemoryType,
    SearchMemoryType,
    Status,
    StoredMemoryType,
    Subgraph,
    Verdict,
    _check_identifier,
    utcnow,
)
from memstream.topics.sealing import SEALED

SCHEMA_VERSION: Literal[1] = 1


def new_event_id() -> str:
    return uuid.uuid4().hex


class Event(BaseModel):
    """Common envelope of every event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: str = Field(default_factory=new_event_id)
    user_id: str
    cube_id: str
    occurred_at: AwareDatetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _default_cube(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("cube_id") and data.get("user_id"):
            data = {**data, "cube_id": data["user_id"]}
        return data

    _ids = field_validator("user_id", "cube_id")(_check_identifier)

    @field_validator("occurred_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    @property
    def kafka_key(self) -> bytes:
        """The Kafka key: the cube id, so one cube's events stay ordered in one partition."""
        return self.cube_id.encode()


# --------------------------------------------------------------------------- conversations


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    role: Literal["user", "assistant", "system", "tool"]
    content: Annotated[str, SEALED] = Field(min_length=1)
    timestamp: AwareDatetime
    name: Annotated[str | None, SEALED] = None


class Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str = Field(min_length=1)
    text: Annotated[str, SEALED] = Field(min_length=1)
    title: Annotated[str | None, SEALED] = None
    uri: str | None = None
    created_at: AwareDatetime | None = None


class ConversationChunk(Event):
    """A few messages of a conversation (``chat``) or a document (``doc``)."""

    kind: Literal["chat", "doc"] = "chat"
    session_id: str | None = None
    messages: tuple[Message, ...] = ()
    document: Document | None = None

    @model_validator(mode="after")
    def _payload_matches_kind(self) -> ConversationChunk:
        if self.kind == "chat" and not self.messages:
            raise ValueError("a chat chunk needs at least one message")
        if self.kind == "chat" and self.document is not None:
            raise ValueError("a chat chunk carries messages, not a document")
        if self.kind == "doc" and self.document is None:
            raise ValueError("a doc chunk needs a document")
        ids = [m.id for m in self.messages]
        if len(ids) != len(set(ids)):
            raise ValueError("message ids must be unique within a chunk")
        return self


# --------------------------------------------------------------------------- memory.items


class Origin(BaseModel):
    """Where in the log an event came from (for read-your-writes and replay)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int
    offset: int


class ExtractedMemory(Event, MemoryDescription):
    """One candidate memory with its provenance, bound for the add/merge stage; what it says
    about itself (key, tags, sources, …) is ``MemoryDescription``, as on the stored node.

    ``id`` is deterministic for extracted memories (cube + source message ids +
    item index) so a replayed chunk upserts the same node.
    """

    id: str | None = None
    memory: Annotated[str, SEALED] = Field(min_length=1)
    memory_type: ItemMemoryType = "LongTermMemory"
    origin: Origin | None = None
    # Position of this item among those extracted from the same chunk.
    chunk_event_id: str | None = None
    index: int = 0
    count: int = 1


# --------------------------------------------------------------------------- memory.commands


class UpdateNode(Event):
    command: Literal["update"] = "update"
    node_id: str
    memory: Annotated[str | None, SEALED] = None
    key: Annotated[str | None, SEALED] = None
    tags: Annotated[tuple[str, ...] | None, SEALED] = None
    # e.g. the JSON value of a LangGraph store item
    background: Annotated[str | None, SEALED] = None
    status: Status | None = None
    frozen: bool | None = None


class Feedback(Event):
    """What the agent that used a memory says of it (``topics.models.Verdict``): ``wrong``
    (never returned again, kept for history), ``outdated`` (its validity closes at this
    event's ``occurred_at``), ``irrelevant`` (demoted for queries like ``query``, the one it
    was returned for), ``confirmed`` (never closed automatically). ``note``: why, in the
    agent's words, shown by ``history`` and ``explain``."""

    command: Literal["feedback"] = "feedback"
    node_id: str = Field(min_length=1)
    verdict: Verdict
    note: Annotated[str, SEALED] = ""
    query: Annotated[str | None, SEALED] = None


class DeleteNodes(Event):
    command: Literal["delete"] = "delete"
    node_ids: tuple[str, ...] = Field(min_length=1)


class ReplaceWorkingMemory(Event):
    command: Literal["replace_working_memory"] = "replace_working_memory"
    node_ids: tuple[str, ...]


class DeleteCube(Event):
    command: Literal["delete_cube"] = "delete_cube"


class DumpCube(Event):
    command: Literal["dump"] = "dump"
    path: str


class LoadCube(Event):
    command: Literal["load"] = "load"
    path: str


class BackupCube(Event):
    command: Literal["backup"] = "backup"
    directory: str
    keep_last: int = Field(default=3, ge=1)
    drop: bool = True


class FreezeNodes(Event):
    """Compliance hold: a frozen node is never merged, updated, archived or expired."""

    command: Literal["freeze"] = "freeze"
    node_ids: tuple[str, ...] = Field(min_length=1)
    reason: str = ""


class UnfreezeNodes(Event):
    command: Literal["unfreeze"] = "unfreeze"
    node_ids: tuple[str, ...] = Field(min_length=1)
    reason: str = ""


class LifecycleSweep(Event):
    """Archive a cube's unused nodes and expire its long-archived ones, as of ``occurred_at``
    (the lifecycle timer publishes one per cube; decisions come from this time, never the
    wall clock at processing, so a redelivered sweep decides the same)."""

    command: Literal["lifecycle"] = "lifecycle"


class ReplayCube(Event):
    """Rebuild a cube's views from the retained log (``streams/replay``).

    Without ``from_offset``/``from_time`` the cube's views are dropped first; with one of them
    the records from that point on are applied again over the current views. ``shadow`` names
    another cube that receives a re-extraction of this cube's conversations with ``llm_model``
    / ``llm_base_url`` in place of the worker's (its API key is the worker's)."""

    command: Literal["replay"] = "replay"
    from_offset: int | None = Field(default=None, ge=0)
    from_time: AwareDatetime | None = None
    shadow: str | None = None
    llm_model: str | None = None
    llm_base_url: str | None = None

    @field_validator("shadow")
    @classmethod
    def _shadow_id(cls, value: str | None) -> str | None:
        return None if value is None else _check_identifier(value)


class PromoteCube(Event):
    """Readers of ``cube_id`` read ``view`` from now on (``view == cube_id`` switches back)."""

    command: Literal["promote"] = "promote"
    view: str

    _view_id = field_validator("view")(_check_identifier)


class DropViews(Event):
    """Drop a cube's views (graph, vectors); its log stays, so a replay brings them back."""

    command: Literal["drop_views"] = "drop_views"


class ShareCube(Event):
    """The cube's owner (``user_id``) lets ``with_user_id`` read it, or also write it."""

    command: Literal["share_cube"] = "share_cube"
    with_user_id: str = Field(min_length=1)
    permission: Literal["read", "write"] = "read"


class UnshareCube(Event):
    """The cube's owner (``user_id``) withdraws what it shared with ``with_user_id``."""

    command: Literal["unshare_cube"] = "unshare_cube"
    with_user_id: str = Field(min_length=1)


MemoryCommand = Annotated[
    UpdateNode | Feedback | DeleteNodes | ReplaceWorkingMemory | DeleteCube | DumpCube | LoadCube
    | BackupCube
    | FreezeNodes | UnfreezeNodes | LifecycleSweep
    | ReplayCube | PromoteCube | DropViews
    | ShareCube | UnshareCube,
    Field(discriminator="command"),
]


# --------------------------------------------------------------------------- memory.updates

UpdateAction = Literal[
    "added",
    "merged",
    "updated",
    "archived",
    "removed",
    "deleted",
    "expired",
    "linked",
    "superseded",  # a later statement ended or replaced it: its validity closed (SUPERSEDES)
    "feedback",  # the agent's verdict on it (``Feedback``); reason says which and why
    "working_memory_replaced",
    "frozen",
    "unfrozen",
    "refused",  # a change a frozen node was spared (a merge, an update); ``reason`` says why
    "replayed",
    "promoted",
    "shared",  # share_cube / unshare_cube changed who may use the cube (reason says how)
    "budget_exceeded",  # the cube spent its LLM token budget; reason says what its stages do
]


MEMORY_UPDATE_VERSION: Literal[3] = 3


class MemoryUpdate(Event):
    """Something changed in a cube's memory. ``node`` is a snapshot after the change.

    Version 2: the snapshot leaves out the node's ``usage`` (the searches that returned it:
    a list that grows with every search, kept in the graph, not re-published on every
    change). Version 1 records carried it; they still decode (and lose it the same way).

    Version 3 (issue 25): the add stage's ``added`` carries no snapshot when the item that
    caused it (``cause_event_id``, on ``memory.items``) rebuilds the node exactly
    (``memstream/history/snapshots.py``); it names the node's ``memory_type`` instead, and
    readers that need the node (history, as-of, explain) put it back from the item.
    ``removed_ids``: the working-memory copies that left to make room for this memory's copy
    (one record per new memory instead of one ``removed`` per evicted copy). Versions 1 and 2
    still decode."""

    schema_version: Literal[1, 2, 3] = MEMORY_UPDATE_VERSION  # type: ignore[assignment]
    action: UpdateAction
    stage: str
    node_id: str | None = None
    node: MemoryItem | None = None
    memory_type: MemoryType | None = None
    related_ids: tuple[str, ...] = ()
    removed_ids: tuple[str, ...] = ()
    edges: tuple[Edge, ...] = ()
    reason: Annotated[str, SEALED] = ""
    cause_event_id: str | None = None
    origin: Origin | None = None

    @field_validator("node")
    @classmethod
    def _without_usage(cls, node: MemoryItem | None) -> MemoryItem | None:
        return node.evolve(usage=()) if node is not None and node.metadata.usage else node


# --------------------------------------------------------------------------- reorganize.*

ReorganizeOp = Literal["add", "remove", "merge", "end"]
REORGANIZE_PRIORITY: dict[str, str] = {
    "add": "reorganize.high",
    "remove": "reorganize.high",
    "merge": "reorganize.normal",
    "end": "reorganize.low",
}


class ReorganizeEvent(Event):
    op: ReorganizeOp
    node_ids: tuple[str, ...] = ()
    memory_type: StoredMemoryType | None = None
    session_id: str | None = None
    reason: str = ""

    @property
    def topic_suffix(self) -> str:
        return REORGANIZE_PRIORITY[self.op]


# --------------------------------------------------------------------------- schedule.*

KNOWN_SCHEDULE_LABELS = ("query", "answer", "add")


class ScheduleMessage(Event):
    """``label`` is free text on purpose: an unknown label is dead-lettered by the dispatcher."""

    label: str = Field(min_length=1)
    content: Annotated[str, SEALED] = ""
    session_id: str | None = None
    memory_ids: tuple[str, ...] = ()


class WorkingMemoryEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    memory: Annotated[str, SEALED]


class WorkingMemoryReplacement(Event):
    session_id: str | None = None
    items: tuple[WorkingMemoryEntry, ...]
    reason: Annotated[str, SEALED] = ""
    queries: Annotated[tuple[str, ...], SEALED] = ()


class ActivationMemory(Event):
    text: Annotated[str, SEALED]
    node_ids: tuple[str, ...] = ()


# --------------------------------------------------------------------------- requests / replies


class WriteToken(BaseModel):
    """Returned by a write; ``search(after=token)`` waits until that write is searchable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int
    offset: int


class RequestBase(Event):
    """``reply_to`` is a full topic name (default: the configured ``replies`` topic); a client
    that reads one partition of it names that partition in ``reply_partition``."""

    reply_to: str | None = None
    reply_partition: int | None = Field(default=None, ge=0)
    correlation_id: str = Field(default_factory=new_event_id, min_length=1)
    requester: str = "client"


MAX_TOP_K = 200
# Cubes one search may read together (each is searched, then merged on one scale).
MAX_SEARCH_CUBES = 16


def _meaningful_query(value: str) -> str:
    if not value.strip():
        raise ValueError("query must contain text (it is empty or whitespace only)")
    return value


class SearchRequest(RequestBase):
    op: Literal["search"] = "search"
    query: Annotated[str, SEALED] = Field(min_length=1)
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K)
    mode: Literal["fast", "fine"] = "fast"
    memory_type: SearchMemoryType = "All"
    search_filter: Annotated[dict[str, JsonValue] | None, SEALED] = None
    session_id: str | None = None
    chat_history: Annotated[tuple[dict[str, str], ...], SEALED] = ()
    after: WriteToken | None = None
    # Hits scoring below this are left out (the score is in [0, 1]).
    min_score: float = Field(default=0.0, ge=0.0, le=1.0)
    # More cubes to search with ``cube_id`` (a shared cube, the other speaker's): one ranking
    # over them all, on one score scale; the user must be allowed to read each one.
    cube_ids: tuple[str, ...] = Field(default=(), max_length=MAX_SEARCH_CUBES - 1)

    _query = field_validator("query")(_meaningful_query)

    @field_validator("cube_ids")
    @classmethod
    def _cubes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_check_identifier(c) for c in value))

    @property
    def cubes(self) -> tuple[str, ...]:
        """Every cube searched, ``cube_id`` first."""
        return tuple(dict.fromkeys((self.cube_id, *self.cube_ids)))


class SubgraphRequest(RequestBase):
    op: Literal["subgraph"] = "subgraph"
    query: Annotated[str, SEALED] = Field(min_length=1)
    top_k: int = Field(default=5, ge=1, le=50)
    depth: int = Field(default=2, ge=1, le=3)
    center_status: Status = "activated"

    _query = field_validator("query")(_meaningful_query)


class GetRequest(RequestBase):
    op: Literal["get"] = "get"
    ids: tuple[str, ...] = Field(min_length=1)


class GetAllRequest(RequestBase):
    op: Literal["get_all"] = "get_all"
    memory_type: MemoryType | None = None
    include_inactive: bool = False
    # One page: nodes from ``offset``, at most ``limit`` (the worker also caps a page at
    # ``limits.page_nodes`` and at what fits in one reply).
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=1000, ge=1, le=10000)


class WorkingMemoryRequest(RequestBase):
    op: Literal["working_memory"] = "working_memory"


class LogRefsRequest(RequestBase):
    """Where a cube's records sit in the log (the provenance index; no text is returned):
    the records naming ``node_id`` (``any_cube``: in whichever cube has it), the node ids
    starting with ``node_prefix``, the records of ``event_ids``, or every record of the cube
    in ``topic`` (``node_less``: those naming no memory). Topics are registry suffixes."""

    op: Literal["log_refs"] = "log_refs"
    any_cube: bool = False
    node_id: str | None = Field(default=None, min_length=1, max_length=256)
    node_prefix: str | None = Field(default=None, min_length=8, max_length=256)
    event_ids: tuple[str, ...] = Field(default=(), max_length=10_000)
    topic: str | None = None
    node_less: bool = False


class DataKeyRequest(RequestBase):
    """A subscriber's request for the cube's data key, to open the sealed fields of the cube's
    records itself (any Kafka client: docs/erasure.md). The key comes back wrapped for
    ``public_key`` (an RSA public key, PEM SubjectPublicKeyInfo, 2048 to 4096 bits), never
    bare: the reply is a record on a topic like any other."""

    op: Literal["data_key"] = "data_key"
    public_key: str = Field(min_length=1, max_length=8192)


Request = Annotated[
    SearchRequest | SubgraphRequest | GetRequest | GetAllRequest | WorkingMemoryRequest
    | LogRefsRequest | DataKeyRequest,
    Field(discriminator="op"),
]


class ScoredMemory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    item: MemoryItem
    # Relevance in [0, 1]: 1 = first in every ranking the search fuses (see README, Search)
    score: float
    # For a hit found through an episode's turns: the turns that match, with neighbours (what
    # to show), the message ids of those turns, and the episode (the context of a statement).
    excerpt: Annotated[str | None, SEALED] = None
    excerpt_ids: tuple[str, ...] = ()
    episode_id: str | None = None
    # Statements the search found whose turns this hit's excerpt (or episode) returns: folded
    # into it rather than returned as hits of their own (their words are in the excerpt).
    # The hit's own statement, when it carries one, is ``item``.
    folded_ids: tuple[str, ...] = ()


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["search"] = "search"
    memories: tuple[ScoredMemory, ...] = ()
    mode_used: Literal["fast", "fine"] = "fast"


class SubgraphResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["subgraph"] = "subgraph"
    subgraph: Subgraph


class NodesResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["nodes"] = "nodes"
    nodes: tuple[MemoryItem, ...] = ()
    # A get_all page: how many nodes match in all, whether more follow and from where.
    total: int | None = None
    truncated: bool = False
    next_offset: int | None = None


class LogRefsResult(BaseModel):
    """Positions by ``"topic|partition"`` (offsets ascending), and the (cube, node id) pairs
    matched; compact, so the refs of a large cube fit one reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["log_refs"] = "log_refs"
    positions: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    nodes: tuple[tuple[str, str], ...] = ()  # (cube id, node id)


class DataKeyResult(BaseModel):
    """The cube's 32-byte data key encrypted with RSA-OAEP (SHA-256 for both the hash and
    MGF1, no label) for the request's public key, base64 (standard alphabet, padded).
    ``kid`` is the key's id, as in every envelope it opens (``topics/sealing.py``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["data_key"] = "data_key"
    kid: str = Field(pattern="^[0-9a-f]{16}$")
    algorithm: Literal["RSA-OAEP-256"] = "RSA-OAEP-256"
    wrapped_key: str = Field(min_length=1)


ReplyResult = Annotated[SearchResult | SubgraphResult | NodesResult | LogRefsResult
                        | DataKeyResult, Field(discriminator="kind")]


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    message: Annotated[str, SEALED]


class Reply(Event):
    correlation_id: str
    ok: bool
    result: ReplyResult | None = None
    error: ErrorInfo | None = None


# --------------------------------------------------------------------------- dead-letter


class DeadLetter(Event):
    """A failed event, kept whole so an operator can fix and re-publish it.

    ``payload`` is the original bytes as UTF-8 text when they decode, else base64.
    """

    stage: str
    error: Annotated[str, SEALED]
    error_type: str
    original_topic: str
    original_partition: int | None = None
    original_offset: int | None = None
    original_key: str | None = None
    payload: Annotated[str, SEALED]
    payload_encoding: Literal["utf-8", "base64"] = "utf-8"
    attempts: int = 1

"""The topic registry: every topic of the contract, declared once.

Producers, stream agents, tests and the topic admin all read this table. Names
are suffixes; the full name carries the configured prefix (``Settings.topic``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, TypeAdapter

from memstream.topics.events import (
    ActivationMemory,
    ConversationChunk,
    DeadLetter,
    ExtractedMemory,
    MemoryCommand,
    MemoryUpdate,
    PromoteCube,
    ReorganizeEvent,
    Reply,
    Request,
    ScheduleMessage,
    WorkingMemoryReplacement,
)
from memstream.topics.sealing import seal_event, sealing_active, unseal
from memstream.topics.settings import Settings


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name suffix, value model, key and retention policy."""

    suffix: str
    value: Any  # a model class or an annotated discriminated union
    key: str = "cube_id"
    partitions: int | None = None  # None: Settings.kafka.partitions
    compacted: bool = False
    retention_ms: int | None = None  # None: broker default; -1 keeps forever
    doc: str = ""
    config: dict[str, str] = field(default_factory=dict)
    # Written without the fields that hold their default (``compact_json``): only for values
    # with no discriminated union inside, whose tag a reader needs even at its default.
    compact: bool = False
    # Written without the fields that hold None (every such field's default): a search reply's
    # sources are mostly empty fields, and replies are the largest records a client reads.
    drop_none: bool = False

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.value)

    def decode(self, raw: bytes | str) -> BaseModel:
        """Validate a raw value; raises ``pydantic.ValidationError`` with a precise message."""
        return self.validate(unseal(raw))

    def validate(self, opened: bytes | str) -> BaseModel:
        """Validate an opened value (``sealing.unseal``: unsealed and inflated) as this topic's."""
        result: BaseModel = self.adapter.validate_json(opened)
        return result

    def plain(self, event: BaseModel) -> bytes:
        """The event's JSON as a reader opens it (compact where the spec says so): what the
        size limit (``limits.event_bytes``) is checked on at both ends, since compression
        shrinks some events far below it and not others."""
        if self.compact:
            return compact_json(event)
        return event.model_dump_json(exclude_none=self.drop_none).encode()

    def encode(self, event: BaseModel, plain: bytes | None = None) -> bytes:
        """The event's JSON (``plain``, made here if not given), with the fields that hold
        what a person said sealed with its cube's data key when erasure is on
        (``topics/sealing.py``). Compression is the producer's, per record batch."""
        data = self.plain(event) if plain is None else plain
        cube = getattr(event, "cube_id", None)
        if isinstance(cube, str) and sealing_active():
            return seal_event(event, data, cube)
        return data

    def name(self, settings: Settings) -> str:
        return settings.topic(self.suffix)

    def partition_count(self, settings: Settings) -> int:
        return self.partitions or settings.kafka.partitions


def compact_json(event: BaseModel) -> bytes:
    """The event's JSON without the fields that hold their default (a reader's model puts
    them back), but always with its ``schema_version``: the version a reader decodes by."""
    data = event.model_dump_json(exclude_defaults=True).encode()
    version = getattr(event, "schema_version", None)
    if version is None or data.startswith(b'{"schema_version"'):
        return data
    return b'{"schema_version":%d,' % version + data[1:] if data != b"{}" else \
        b'{"schema_version":%d}' % version


KEEP_FOREVER = -1
# Requests and replies matter for seconds (a client waits 30 s by default). Kept by the
# broker's default, replies were 80% of the embedded broker's snapshot after a load bench
# with searches (noida writes its whole log as one JSON file, so its size is load time);
# kept an hour, a search still left ~50 KB in it. The worker deletes them two minutes after
# they are written (``memstream/kafka/trim.py``, DeleteRecords, which noida drops from its file);
# this retention is the broker's fallback, longer on purpose: once noida's retention has
# moved a partition's start, DeleteRecords finds nothing to do, and the records measured
# still in its file (bench/log_volume.py: 4.2 MB of replies after 150 searches).
EXCHANGE_RETENTION_MS = 600_000

CONVERSATIONS = TopicSpec(
    "conversations", ConversationChunk, retention_ms=KEEP_FOREVER, compact=True,
    doc="Conversation chunks and documents from applications; the source of truth.",
)
MEMORY_ITEMS = TopicSpec(
    "memory.items", ExtractedMemory, retention_ms=KEEP_FOREVER, compact=True,
    doc="Candidate memories with provenance, from extraction or added directly.",
)
MEMORY_COMMANDS = TopicSpec(
    "memory.commands", MemoryCommand, retention_ms=KEEP_FOREVER,
    doc="update / delete / replace_working_memory / delete_cube / dump / load / backup.",
)
MEMORY_UPDATES = TopicSpec(
    "memory.updates", MemoryUpdate, retention_ms=KEEP_FOREVER,  # history and as_of read it
    compact=True, doc="Every change to a cube's memory: ids, the change, a snapshot (v3: not "
    "the one an added's item holds).",
)
REORGANIZE_HIGH = TopicSpec("reorganize.high", ReorganizeEvent, doc="add / remove",
                            compact=True)
REORGANIZE_NORMAL = TopicSpec("reorganize.normal", ReorganizeEvent, doc="merge", compact=True)
REORGANIZE_LOW = TopicSpec("reorganize.low", ReorganizeEvent, doc="end", compact=True)
SCHEDULE_QUERY = TopicSpec("schedule.query", ScheduleMessage, doc="the user asked something")
SCHEDULE_ANSWER = TopicSpec("schedule.answer", ScheduleMessage, doc="the agent answered")
SCHEDULE_ADD = TopicSpec("schedule.add", ScheduleMessage, doc="memories were added by hand")
WORKING_MEMORY = TopicSpec(
    "working-memory", WorkingMemoryReplacement, doc="ordered working-memory replacements",
    compact=True,
)
ACTIVATION_MEMORY = TopicSpec(
    "activation-memory", ActivationMemory, doc="rendered, ready-to-prepend context blocks",
)
REPLIES_RETENTION_MS = EXCHANGE_RETENTION_MS  # replies also carry memory text
REQUESTS = TopicSpec("requests", Request, retention_ms=EXCHANGE_RETENTION_MS,
                     doc="search and other queries (data_key: a cube's key, for a subscriber), "
                     "answered on reply_to")
REPLIES = TopicSpec(
    "replies", Reply, key="requester (or the request's reply_partition)",
    retention_ms=REPLIES_RETENTION_MS, drop_none=True,
    doc="default reply topic; clients may name their own in reply_to",
)
DEAD_LETTER = TopicSpec(
    "dead-letter", DeadLetter, key="original key", retention_ms=KEEP_FOREVER,
    doc="failed events with stage, error and the original payload",
)

CUBE_VIEWS = TopicSpec(
    "cube-views", PromoteCube, compacted=True, retention_ms=KEEP_FOREVER,
    doc="which cube's views answer a cube's reads (promote); one record per cube",
)

ALL_TOPICS: tuple[TopicSpec, ...] = (
    CONVERSATIONS,
    MEMORY_ITEMS,
    MEMORY_COMMANDS,
    MEMORY_UPDATES,
    REORGANIZE_HIGH,
    REORGANIZE_NORMAL,
    REORGANIZE_LOW,
    SCHEDULE_QUERY,
    SCHEDULE_ANSWER,
    SCHEDULE_ADD,
    WORKING_MEMORY,
    ACTIVATION_MEMORY,
    REQUESTS,
    REPLIES,
    DEAD_LETTER,
    CUBE_VIEWS,
)
BY_SUFFIX: dict[str, TopicSpec] = {spec.suffix: spec for spec in ALL_TOPICS}

# Topics served by a request lane (``streams/runtime/lane.py``) in a consumer group of their own,
# apart from the stages' group (``Settings.app_id``).
LANE_TOPICS: tuple[TopicSpec, ...] = (REQUESTS,)


def consumer_group(settings: Settings, spec: TopicSpec) -> str:
    """The consumer group whose committed offsets say how far workers got on ``spec``."""
    return f"{settings.app_id}-{spec.suffix}" if spec in LANE_TOPICS else settings.app_id


# The topics a worker consumes today (its lag is what `memstream status` reports).
WORKER_INPUTS: tuple[TopicSpec, ...] = (
    CONVERSATIONS, MEMORY_ITEMS, MEMORY_COMMANDS, REQUESTS,
    SCHEDULE_QUERY, SCHEDULE_ANSWER, SCHEDULE_ADD, WORKING_MEMORY,
    REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW,
)

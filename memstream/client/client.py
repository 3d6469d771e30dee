"""The Python client that speaks the topic contract.

``async with MemoryClient(settings) as client`` publishes conversations, documents
and memories (each write returns a ``WriteToken``), follows ``memory.updates``,
and waits until a write has been applied by the workers (read-your-writes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel, ValidationError

from memstream.archive.reading import archived, seek_past_archive
from memstream.client.replies import ReplyListener
from memstream.client.workers import GroupMembers, WorkerProbe
from memstream.history import indexed as provenance_read
from memstream.history.provenance import Change, Explanation
from memstream.kafka import tracing
from memstream.kafka.compat import pause_consumer, start_or_release, stop_within
from memstream.kafka.headers import headers_for, headers_for_payload
from memstream.kafka.progress import NotAppliedYet, Progress
from memstream.security.keys import activate as activate_keys
from memstream.security.keys import release as release_keys
from memstream.security.signing import Signer
from memstream.topics.context import DEFAULT_BUDGET, ContextBlock, Unit, hits_for, render_context
from memstream.topics.events import (
    ConversationChunk,
    DeadLetter,
    Document,
    Event,
    ExtractedMemory,
    Feedback,
    GetAllRequest,
    GetRequest,
    MemoryUpdate,
    Message,
    NodesResult,
    Reply,
    RequestBase,
    ScheduleMessage,
    ScoredMemory,
    SearchRequest,
    SearchResult,
    SubgraphRequest,
    SubgraphResult,
    WorkingMemoryRequest,
    WriteToken,
    new_event_id,
)
from memstream.topics.limits import LimitExceeded, check_content, check_encoded
from memstream.topics.models import (
    MemoryItem,
    MemoryType,
    SearchMemoryType,
    SourceRef,
    Subgraph,
    Verdict,
    utcnow,
)
from memstream.topics.registry import (
    BY_SUFFIX,
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    REQUESTS,
    SCHEDULE_ADD,
    SCHEDULE_ANSWER,
    SCHEDULE_QUERY,
    TopicSpec,
    consumer_group,
)
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.client")


class ClientError(RuntimeError):
    """The client could not do what was asked (not started, timeout, broker unreachable)."""


class MemoryServiceError(ClientError):
    """The service answered a request with an error (bad request, unknown cube, …)."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message


def _call_span(call: str, event: BaseModel | None) -> AbstractContextManager[Any]:
    """The span of one client call (``memstream.client.search``, ``...add_messages``)."""
    return tracing.span(f"memstream.client.{call}", {
        "memstream.user_id": getattr(event, "user_id", None),
        "memstream.cube_id": getattr(event, "cube_id", None)}, kind="client")


__all__ = ["ClientError", "LimitExceeded", "MemoryClient", "MemoryServiceError"]

SCHEDULE_TOPICS = {"query": SCHEDULE_QUERY, "answer": SCHEDULE_ANSWER, "add": SCHEDULE_ADD}

# How long a history read waits for records it knows are there before it gives up.
HISTORY_STALL_S = 30.0
# A reply this late makes the client ask whether any worker is in the request group; a
# second look after a worker had time to join, then "no worker is running" (within ~3 s).
NO_WORKER_FIRST_LOOK_S = 1.0
NO_WORKER_SECOND_LOOK_S = 1.5


class MemoryClient:
    """Async client for memstream's topics. Start it with ``async with`` or ``start()``."""

    def __init__(self, settings: Settings | None = None, bootstrap: str | None = None) -> None:
        self.settings = settings or Settings()
        self._bootstrap = bootstrap or self.settings.kafka.bootstrap_servers
        self._producer: AIOKafkaProducer | None = None
        self._progress: Progress | None = None
        self._replies: ReplyListener | None = None
        self._replies_lock = asyncio.Lock()  # concurrent first requests start one listener
        self.client_id = f"{self.settings.kafka.client_id}-{new_event_id()[:12]}"
        self._keys: Path | None = None  # the key directory this client activated
        self._probe: WorkerProbe | None = None  # asks whether a worker is there
        self.provenance_readers: provenance_read.Readers | None = None  # history, explain
        self._signer = Signer.of(self.settings.security)  # None: publishes unsigned

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            from memstream.local.datadir import find_data_dir

            raise ClientError("no Kafka bootstrap server: no broker runs in "
                              f"{find_data_dir(self.settings)}; run `memstream up` there, or "
                              "set MEMSTREAM_DATA_DIR or MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS")
        return self._bootstrap

    async def start(self) -> None:
        if self._bootstrap is None:
            from memstream.local.broker import running_broker
            from memstream.local.datadir import find_data_dir

            # the stack `memstream up` started here or in a parent directory
            self._bootstrap = await running_broker(find_data_dir(self.settings) / "broker")
        from memstream.kafka.admin import ensure_topics

        if (key_dir := self.settings.erasure_key_dir) is not None and self._keys is None:
            activate_keys(key_dir)  # seal what it publishes with per-cube keys
            self._keys = key_dir
        await ensure_topics(self.settings, self.bootstrap)
        tracing.configure(self.settings.tracing, "memstream-client")
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", client_id=self.settings.kafka.client_id,
            linger_ms=0, compression_type=self.settings.kafka.producer_compression,
        )
        await self._producer.start()

    async def close(self) -> None:
        if self._keys is not None:
            release_keys(self._keys)
            self._keys = None
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_within(producer, "producer")
        progress, self._progress = self._progress, None
        if progress is not None:
            await progress.close()  # bounded inside
        replies, self._replies = self._replies, None
        if replies is not None:
            await replies.close()  # bounded inside
        probe, self._probe = self._probe, None
        if probe is not None:
            await probe.close()
        readers, self.provenance_readers = self.provenance_readers, None
        if readers is not None:
            await readers.close()

    async def __aenter__(self) -> MemoryClient:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ writes

    async def publish(
        self, spec: TopicSpec, event: BaseModel, key: bytes | None = None
    ) -> WriteToken:
        """Publish one contract event; returns where it landed.

        Raises ``LimitExceeded`` (a ``ValueError``) for an event over a size limit, before
        anything reaches the broker."""
        if self._producer is None:
            raise ClientError("client not started: use `async with MemoryClient(...)`")
        if key is None and isinstance(event, Event):
            key = event.kafka_key
        check_content(event, self.settings.limits)
        plain = spec.plain(event)  # the worker checks the opened value against the same limit
        check_encoded(plain, self.settings.limits, type(event).__name__)
        data = spec.encode(event, plain)
        check_encoded(data, self.settings.limits, type(event).__name__)
        try:
            with tracing.span(f"memstream.client.publish {spec.suffix}", {
                    "messaging.system": "kafka", "messaging.destination.name":
                    spec.name(self.settings)}, kind="producer"):
                meta = await self._producer.send_and_wait(
                    spec.name(self.settings), data, key=key,
                    headers=headers_for(event, data, self._signer))
        except KafkaError as exc:
            raise ClientError(f"could not publish to {spec.name(self.settings)} at "
                              f"{self.bootstrap}: {exc}; is the broker running?") from exc
        return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)

    async def add_messages(
        self,
        user_id: str,
        messages: Sequence[Message | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Publish a conversation chunk. Messages need ``role`` and ``content``; a missing ``id``
        or ``timestamp`` is filled in (an id from the chunk, the current time)."""
        chunk_id = new_event_id()
        now = utcnow()
        msgs = []
        for i, m in enumerate(messages):
            if isinstance(m, Message):
                msgs.append(m)
                continue
            data = {"id": f"{chunk_id}-{i}", "timestamp": now, **dict(m)}
            msgs.append(Message.model_validate(data))
        chunk = ConversationChunk(
            event_id=chunk_id, user_id=user_id, cube_id=cube_id or user_id, kind="chat",
            session_id=session_id, messages=tuple(msgs),
        )
        with _call_span("add_messages", chunk):
            return await self.publish(CONVERSATIONS, chunk)

    async def add_document(
        self,
        user_id: str,
        text: str,
        cube_id: str | None = None,
        doc_id: str | None = None,
        title: str | None = None,
        uri: str | None = None,
    ) -> WriteToken:
        """Publish a document; the extraction stage chunks it (``source=file``)."""
        doc = Document(doc_id=doc_id or new_event_id(), text=text, title=title, uri=uri)
        chunk = ConversationChunk(user_id=user_id, cube_id=cube_id or user_id, kind="doc",
                                  document=doc)
        with _call_span("add_document", chunk):
            return await self.publish(CONVERSATIONS, chunk)

    async def add_memories(
        self,
        user_id: str,
        memories: Sequence[str | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Add memories directly (no extraction). Each is a text or ExtractedMemory fields."""
        items = []
        for i, m in enumerate(memories):
            fields: dict[str, Any] = {"memory": m} if isinstance(m, str) else dict(m)
            fields.setdefault("sources", (SourceRef(kind="manual"),))
            items.append(ExtractedMemory(
                user_id=user_id, cube_id=cube_id or user_id, session_id=session_id,
                index=i, count=len(memories), **fields,
            ))
            check_content(items[-1], self.settings.limits)  # all checked before any is sent
        token: WriteToken | None = None
        with _call_span("add_memories", items[0] if items else None):
            for item in items:
                token = await self.publish(MEMORY_ITEMS, item)
        if token is None:
            raise ClientError("add_memories needs at least one memory")
        return token

    # ------------------------------------------------------------------ queries

    async def _reply_listener(self) -> ReplyListener:
        """The started reply listener; only published once its partition is chosen and read."""
        async with self._replies_lock:
            if self._replies is None:
                listener = ReplyListener(self.settings, self.bootstrap)
                try:
                    await listener.start()
                except KafkaError as exc:
                    raise ClientError(f"the broker at {self.bootstrap} could not be reached "
                                      f"({exc}); is it running?") from exc
                self._replies = listener
            return self._replies

    async def request(self, request: RequestBase, timeout: float = 30.0) -> Reply:
        """Send any request and wait for its reply (raises ``MemoryServiceError`` on an error)."""
        try:
            async with asyncio.timeout(timeout):
                replies = await self._reply_listener()
        except TimeoutError as exc:
            raise ClientError(f"the broker at {self.bootstrap} did not answer within "
                              f"{timeout}s; is it running?") from exc
        request = request.model_copy(update={
            "reply_to": replies.topic, "reply_partition": replies.partition,
            "requester": self.client_id,
        })
        future = replies.expect(request.correlation_id)
        try:
            async with asyncio.timeout(timeout):  # the send and the answer, together
                with _call_span(str(getattr(request, "op", "request")), request):
                    await self.publish(REQUESTS, request)
                    reply = await self._answer(future)
        except TimeoutError as exc:
            raise ClientError(f"no reply to {type(request).__name__} within {timeout}s; "
                              "is a worker running?") from exc
        finally:
            replies.forget(request.correlation_id)
        if not reply.ok:
            error = reply.error
            raise MemoryServiceError(error.type if error else "Error",
                                     error.message if error else "unknown error")
        return reply

    async def request_workers(self) -> GroupMembers | None:
        """The live members of the group that answers requests (None: the broker did not
        say): whether any worker is there to answer, or to index the log."""
        if self._probe is None:
            self._probe = WorkerProbe(self.bootstrap, consumer_group(self.settings, REQUESTS))
        return await self._probe.members()

    async def _answer(self, future: asyncio.Future[Reply]) -> Reply:
        """The reply; when it is late, whether any worker is there to send it: none (after
        a second look, a worker may be joining) fails at once instead of at the timeout."""
        for wait in (NO_WORKER_FIRST_LOOK_S, NO_WORKER_SECOND_LOOK_S):
            done, _ = await asyncio.wait({future}, timeout=wait)
            if done:
                return future.result()
            members = await self.request_workers()
            if members is None or members.live:
                return await future
        assert members is not None  # noqa: S101 - the loop returned otherwise
        raise ClientError(f"no worker is running: {members.describe()}; start one with "
                          "`memstream up` (or `memstream worker`)")

    async def search(
        self,
        user_id: str,
        query: str,
        cube_id: str | None = None,
        top_k: int = 10,
        mode: Literal["fast", "fine"] = "fast",
        memory_type: SearchMemoryType = "All",
        search_filter: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        chat_history: Sequence[Mapping[str, str]] = (),
        after: WriteToken | None = None,
        timeout: float = 30.0,
        min_score: float = 0.0,
        cube_ids: Sequence[str] = (),
    ) -> list[ScoredMemory]:
        """Memories answering ``query``, best first. ``after``: wait until that write is applied;
        ``min_score`` (0..1): leave out hits scoring below it. ``cube_ids``: more cubes to
        search with ``cube_id`` (default: the first of them, else the user's own): one ranking
        over them all, on one score scale, each turn once; the user must be allowed to read
        every one."""
        cube = cube_id or (cube_ids[0] if cube_ids else user_id)
        req = SearchRequest(
            user_id=user_id, cube_id=cube, query=query, top_k=top_k, mode=mode,
            memory_type=memory_type, search_filter=dict(search_filter) if search_filter else None,
            session_id=session_id, chat_history=tuple(dict(t) for t in chat_history), after=after,
            min_score=min_score, cube_ids=tuple(c for c in cube_ids if c != cube),
        )
        result = (await self.request(req, timeout)).result
        assert isinstance(result, SearchResult)  # noqa: S101
        return list(result.memories)

    async def context(
        self,
        user_id: str,
        query: str,
        budget: int = DEFAULT_BUDGET,
        cube_id: str | None = None,
        cube_ids: Sequence[str] | None = None,
        *,
        unit: Unit = "chars",
        top_k: int | None = None,
        memory_type: SearchMemoryType = "All",
        search_filter: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        after: WriteToken | None = None,
        timeout: float = 30.0,
    ) -> ContextBlock:
        """A block ready for a prompt: the hits of a fast search for ``query``, most relevant
        first, each with its id, date and speakers, within ``budget`` characters (``unit=
        "tokens"``: estimated tokens); ``.text`` and ``.ids`` (``memstream.topics.context``).
        ``top_k``: hits asked for (default: enough to fill the budget). ``cube_ids``: more
        cubes searched with ``cube_id``, as ``search`` does (one ranking)."""
        if budget < 1:
            raise ValueError("budget must be at least 1")
        hits = await self.search(
            user_id, query, cube_id=cube_id, top_k=top_k or hits_for(budget, unit),
            memory_type=memory_type, search_filter=search_filter, session_id=session_id,
            after=after, timeout=timeout, cube_ids=cube_ids or ())
        return render_context(hits, budget, unit)

    async def subgraph(
        self, user_id: str, query: str, cube_id: str | None = None, top_k: int = 5,
        depth: int = 2, timeout: float = 30.0,
    ) -> Subgraph:
        """The nodes most similar to ``query`` with their neighbourhoods, merged."""
        req = SubgraphRequest(user_id=user_id, cube_id=cube_id or user_id, query=query,
                              top_k=top_k, depth=depth)
        result = (await self.request(req, timeout)).result
        assert isinstance(result, SubgraphResult)  # noqa: S101
        return result.subgraph

    async def get(
        self, user_id: str, ids: Sequence[str], cube_id: str | None = None, timeout: float = 30.0
    ) -> list[MemoryItem]:
        req = GetRequest(user_id=user_id, cube_id=cube_id or user_id, ids=tuple(ids))
        return await self._nodes(req, timeout)

    async def get_all(
        self, user_id: str, cube_id: str | None = None, memory_type: MemoryType | None = None,
        include_inactive: bool = False, timeout: float = 30.0, limit: int | None = None,
    ) -> list[MemoryItem]:
        """Every node of the cube (at most ``limit``), page by page; replies are bounded."""
        nodes: list[MemoryItem] = []
        offset: int | None = 0
        while offset is not None and (limit is None or len(nodes) < limit):
            page_size = self.settings.limits.page_nodes  # what one reply may carry
            want = page_size if limit is None else min(page_size, limit - len(nodes))
            page = await self.get_all_page(user_id, cube_id, memory_type, include_inactive,
                                           offset, want, timeout)
            nodes += page.nodes
            offset = page.next_offset if page.nodes else None
        return nodes

    async def get_all_page(
        self, user_id: str, cube_id: str | None = None, memory_type: MemoryType | None = None,
        include_inactive: bool = False, offset: int = 0, limit: int = 1000,
        timeout: float = 30.0,
    ) -> NodesResult:
        """One page of ``get_all``: ``total``, and ``next_offset`` when more nodes follow."""
        req = GetAllRequest(user_id=user_id, cube_id=cube_id or user_id, memory_type=memory_type,
                            include_inactive=include_inactive, offset=offset, limit=limit)
        result = (await self.request(req, timeout)).result
        assert isinstance(result, NodesResult)  # noqa: S101
        return result

    async def working_memory(
        self, user_id: str, cube_id: str | None = None, timeout: float = 30.0
    ) -> list[MemoryItem]:
        """The cube's working memory, in its current order."""
        req = WorkingMemoryRequest(user_id=user_id, cube_id=cube_id or user_id)
        return await self._nodes(req, timeout)

    async def _nodes(self, req: RequestBase, timeout: float) -> list[MemoryItem]:
        result = (await self.request(req, timeout)).result
        assert isinstance(result, NodesResult)  # noqa: S101
        return list(result.nodes)

    # ------------------------------------------------------------------ scheduler and commands

    async def schedule(
        self, user_id: str, label: Literal["query", "answer", "add"], content: str = "",
        cube_id: str | None = None, session_id: str | None = None,
        memory_ids: Sequence[str] = (),
    ) -> WriteToken:
        """Tell the scheduler the user asked (``query``), the agent answered (``answer``), or
        memories were added by hand (``add``)."""
        spec = SCHEDULE_TOPICS.get(label)
        if spec is None:
            raise ValueError(f"unknown schedule label {label!r}; use query, answer or add")
        msg = ScheduleMessage(user_id=user_id, cube_id=cube_id or user_id, label=label,
                              content=content, session_id=session_id,
                              memory_ids=tuple(memory_ids))
        return await self.publish(spec, msg)

    async def command(self, command: Event) -> WriteToken:
        """Publish a ``MemoryCommand`` (update, delete, replace_working_memory, delete_cube, …)."""
        validated = MEMORY_COMMANDS.adapter.validate_python(command)
        return await self.publish(MEMORY_COMMANDS, validated)

    async def feedback(
        self, user_id: str, memory_id: str, verdict: Verdict, note: str | None = None, *,
        query: str | None = None, cube_id: str | None = None,
    ) -> WriteToken:
        """Say what a memory was worth to the agent that used it (a ``Feedback`` command):
        ``wrong`` (never returned again, kept for history), ``outdated`` (no longer holds),
        ``irrelevant`` (ranked lower for queries like ``query``, the one it was returned
        for), ``confirmed`` (true: nothing closes it automatically). ``note``: why, shown by
        ``history`` and ``explain``. ``memory_id`` is an exact id (a working-memory copy's
        applies to its memory); resolve prefixes first (``memstream.history.ids.stored``).
        ``wait_applied`` the token, then ``command_failure`` says if it was refused (an
        unknown id, a frozen memory)."""
        event = Feedback(user_id=user_id, cube_id=cube_id or user_id, node_id=memory_id,
                         verdict=verdict, note=note or "", query=query)
        with _call_span("feedback", event):
            return await self.command(event)

    # ------------------------------------------------------------------ reads

    async def updates(
        self, cube_id: str | None = None, from_beginning: bool = False
    ) -> AsyncGenerator[MemoryUpdate, None]:
        """Follow ``memory.updates`` (optionally one cube), from now or from the beginning."""
        async for event in self._follow(MEMORY_UPDATES, cube_id, from_beginning):
            assert isinstance(event, MemoryUpdate)  # noqa: S101 - the registry's type
            yield event

    async def dead_letters(
        self, from_beginning: bool = True
    ) -> AsyncGenerator[DeadLetter, None]:
        async for event in self._follow(DEAD_LETTER, None, from_beginning):
            assert isinstance(event, DeadLetter)  # noqa: S101
            yield event

    async def history(
        self, topic: TopicSpec | str, cube_id: str | None = None
    ) -> list[BaseModel]:
        """Every record of a topic (optionally one cube) up to its current end, in partition
        order: what the log holds now, e.g. ``history("memory.updates", cube_id="alice")``.
        ``topic`` is a name (``"memory.updates"``, with or without the prefix) or a spec."""
        spec = self.topic_spec(topic) if isinstance(topic, str) else topic
        return [e async for e in self._follow(spec, cube_id, True, until_end=True)]

    def topic_spec(self, name: str) -> TopicSpec:
        """The contract topic called ``name`` (``memory.updates`` or its prefixed name)."""
        prefix = self.settings.kafka.topic_prefix
        suffix = name[len(prefix):] if prefix and name.startswith(prefix) else name
        spec = BY_SUFFIX.get(suffix)
        if spec is None:
            raise ValueError(f"unknown topic {name!r}; topics are "
                             f"{', '.join(sorted(BY_SUFFIX))}")
        return spec

    async def _follow(
        self, spec: TopicSpec, cube_id: str | None, from_beginning: bool, until_end: bool = False
    ) -> AsyncIterator[BaseModel]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            await start_or_release(consumer, "history consumer")
        except KafkaError as exc:
            raise ClientError(f"could not read {spec.name(self.settings)}: the broker at "
                              f"{self.bootstrap} could not be reached ({exc}); is it "
                              "running?") from exc
        # a live subscriber waits on what comes next; a history read is background work
        pause_consumer(consumer, self.settings.kafka, self.bootstrap, latency=not until_end)
        try:
            name = spec.name(self.settings)
            parts = consumer.partitions_for_topic(name) or set()
            if not parts:
                await consumer.topics()  # refreshes metadata
                parts = consumer.partitions_for_topic(name) or set()
            tps = [TopicPartition(name, p) for p in sorted(parts)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps) if until_end else {}
            at: dict[TopicPartition, int] = {}
            if from_beginning:
                for tp in tps:  # the archived records first, then the broker's (one log)
                    for msg in archived(self.settings, tp):
                        event = self._decoded(spec, msg)
                        if event is not None and (
                                cube_id is None or getattr(event, "cube_id", None) == cube_id):
                            yield event
                at = await seek_past_archive(consumer, self.settings, tps)
            else:
                await consumer.seek_to_end(*tps)
            remaining = {tp for tp in tps if ends.get(tp, 1) > at.get(tp, 0)}
            last_records = time.monotonic()
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=1000)
                if batch:
                    last_records = time.monotonic()
                elif until_end and time.monotonic() - last_records > HISTORY_STALL_S:
                    raise ClientError(
                        f"reading {name} up to its end: no records from the broker at "
                        f"{self.bootstrap} for {HISTORY_STALL_S:.0f}s; is it running?")
                for tp, msgs in batch.items():
                    for msg in msgs:
                        if until_end and msg.offset >= ends[tp]:
                            break
                        event = self._decoded(spec, msg)
                        if event is not None and (
                                cube_id is None or getattr(event, "cube_id", None) == cube_id):
                            yield event
                    if until_end and await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        finally:
            await stop_within(consumer, "history consumer")

    def _decoded(self, spec: TopicSpec, msg: Any) -> BaseModel | None:
        try:
            return spec.decode(msg.value or b"")
        except ValidationError as exc:
            log.warning("skipping undecodable %s record at %d: %s",
                        spec.name(self.settings), msg.offset, exc)
            return None

    async def redrive(self, letter: DeadLetter) -> WriteToken:
        """Publish a dead letter's original payload again to its original topic (after the
        cause was fixed); it gets a new offset, and dead-letters again if it fails again."""
        if self._producer is None:
            raise ClientError("client not started: use `async with MemoryClient(...)`")
        import base64

        data = base64.b64decode(letter.payload) if letter.payload_encoding == "base64" \
            else letter.payload.encode("utf-8")
        check_encoded(data, self.settings.limits, "dead letter payload")
        key = letter.original_key.encode("utf-8") if letter.original_key is not None else None
        # signed again by this client's application: re-driving vouches for the event anew
        headers = headers_for_payload(data, self._signer, letter)
        meta = await self._producer.send_and_wait(letter.original_topic, data, key=key,
                                                  headers=headers)
        return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)

    async def command_failure(self, token: WriteToken) -> str | None:
        """The dead-letter error of the event behind ``token``, if it failed (else None)."""
        for letter in await self.history(DEAD_LETTER):
            assert isinstance(letter, DeadLetter)  # noqa: S101
            if (letter.original_topic, letter.original_partition, letter.original_offset) == (
                    token.topic, token.partition, token.offset):
                return letter.error
        return None

    # ------------------------------------------------------------------ provenance (the log)

    async def memory_history(self, node_id: str, cube_id: str | None = None) -> list[Change]:
        """Every change of a memory, oldest first, each with the event that caused it.
        (``history`` reads a topic; this reads one memory's story.)"""
        try:
            return await provenance_read.memory_history(self, node_id, cube_id)
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc

    async def as_of(self, cube_id: str, at: datetime, *,
                    time: Literal["recorded", "valid"] = "recorded") -> list[MemoryItem]:
        """What the cube held at ``at`` (working-memory copies aside), rebuilt from
        ``memory.updates``. ``time="valid"``: ``at`` is in the conversation's time — the
        memories that held then (``MemoryMetadata.valid_at``: begun, not yet closed by a
        later statement or by feedback), as the cube knows them now."""
        try:
            if time == "recorded":
                return await provenance_read.cube_as_of(self, cube_id, at)
            now = await provenance_read.cube_as_of(self, cube_id, datetime.now(UTC))
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc
        return [n for n in now if n.metadata.status == "activated" and n.metadata.valid_at(at)]

    async def explain(self, node_id: str, cube_id: str | None = None) -> Explanation:
        """Why the cube holds a memory: its source messages (text from the log) and the
        merges and inferences that led to it."""
        try:
            return await provenance_read.explain(self, node_id, cube_id)
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc

    # ------------------------------------------------------------------ read-your-writes

    async def wait_applied(self, token: WriteToken, timeout: float = 60.0) -> None:
        """Return once the write behind ``token`` has been processed by every stage it feeds.

        Uses the workers' committed consumer offsets (a stage commits only after its
        outputs are acknowledged), so it holds across any number of workers.
        """
        if self._progress is None:
            self._progress = Progress(self.settings, self.bootstrap)
        try:
            await self._progress.wait_applied(token, timeout=timeout)
        except NotAppliedYet as exc:
            raise ClientError(str(exc)) from exc

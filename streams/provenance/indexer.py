"""The provenance indexer: records where each cube's records sit in the log.

A consumer in a group of its own (``index_group``) reads the topics provenance needs
(``history.log_index.INDEXED``), turns each record into refs (cube, topic, partition, offset,
event id, the memories it names) and writes them to the graph store, then commits. Refs are
upserts keyed by position, so a redelivered batch writes nothing new; the group's committed
offsets tell a reader how far the index goes. A replay re-announces a cube's updates under
the same event ids at new offsets, which are indexed like any other record.

History, explain and as-of then fetch a cube's records by position instead of reading every
cube's records (issue #27: the cost followed the whole log, and the raw-bytes filter found
nothing in sealed records).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from memstream.history.log_index import INDEXED, LogRef, index_group, refs_of
from memstream.kafka.compat import cancel_within
from memstream.kafka.members import worker_client_id
from memstream.sinks.ports import GraphStore
from memstream.streams.runtime.stage import Pause
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.provenance")


class ProvenanceIndexer:
    def __init__(self, settings: Settings, bootstrap: str, graph: GraphStore) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.graph = graph
        self.group_id = index_group(settings)
        self._suffix = {spec.name(settings): spec.suffix for spec in INDEXED}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self.indexed = 0  # records read (for tests and logs)

    async def start(self) -> None:
        k = self.settings.kafka
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group_id,
            client_id=worker_client_id(f"{k.client_id}-provenance"),
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_partition_fetch_bytes=4 * 1024 * 1024,
            session_timeout_ms=int(k.session_timeout_s * 1000),
            heartbeat_interval_ms=int(k.heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(k.rebalance_timeout_s * 1000),
        )
        await consumer.start()
        consumer.subscribe(list(self._suffix))
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="provenance-indexer")

    async def stop(self) -> None:
        """End the indexing loop (cancelled again if a library swallows the cancel: a worker's
        stop once hung 295 s on it), then stop its consumer."""
        task, self._task = self._task, None
        await cancel_within(task, "provenance indexing loop")
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10)

    async def _run(self) -> None:
        assert self._consumer is not None  # noqa: S101
        consumer = self._consumer
        pause = Pause("provenance index", self.settings.worker.retry_backoff_s)
        # indexed but not committed (the group refused the commit): sent again with the next
        # commit, or on its own when nothing new arrives — a refusal that came back after a
        # rebalance gave the partition back does not make the consumer read it again
        unsent: dict[TopicPartition, OffsetAndMetadata] = {}
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
            except KafkaError as exc:  # broker down or restarting: back off, keep trying
                await pause.wait(exc)
                continue
            if not batch:
                if unsent:
                    unsent = await self._commit(consumer, unsent, pause)
                continue
            refs: list[LogRef] = []
            ends: dict[TopicPartition, OffsetAndMetadata] = {}
            for tp, records in batch.items():
                suffix = self._suffix[tp.topic]
                for record in records:
                    refs += refs_of(suffix, tp.partition, record.offset, record.value or b"")
                ends[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
            await self._write(refs, pause)
            self.indexed += sum(len(r) for r in batch.values())
            unsent = await self._commit(consumer, {**unsent, **ends}, pause)

    @staticmethod
    async def _commit(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, OffsetAndMetadata],
                      pause: Pause) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``ends`` for the partitions still held; what the group refused, to send
        again (indexing a record twice is an upsert)."""
        held = consumer.assignment()
        ends = {tp: end for tp, end in ends.items() if tp in held}
        if not ends:
            return {}
        try:
            await consumer.commit(ends)
        except KafkaError as exc:  # mid-rebalance
            log.info("provenance index: commit deferred: %s", exc)
            return ends
        pause.resumed()
        return {}

    async def _write(self, refs: list[LogRef], pause: Pause) -> None:
        """Write until the store takes them: a batch is never committed unindexed."""
        while refs:
            try:
                await self.graph.add_log_refs(refs)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - an outage of the store: wait, retry
                await pause.wait(exc)

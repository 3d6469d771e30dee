"""Transient topics leave the broker's disk within minutes, whatever the broker does with
``retention.ms``.

Requests and replies matter for seconds (a client waits 30 s by default), yet each search
writes a reply of tens of KB. noida-db (the embedded broker) applies ``retention.ms`` only
when it next saves its data file, which an idle broker never does, and a broker's default
retention keeps them for days. So the worker deletes (Kafka DeleteRecords) what is older
than its keep time (``KEEP_S``) in the topics that nobody replays; noida rewrites its file
at once, which ``bench/log_volume.py`` checks by the file's size.

A reply is read by its client within milliseconds of being written, and is kept
``REPLY_KEEP_S``. Kept two minutes, as requests are, the replies of a client searching
back to back were three quarters of the broker's file (31 of 43 MB after 500 searches of
the dev split: a 14 KB compressed reply is 51 KB in noida's file), which the broker
rewrote every second: its save thread took a quarter of a core beside the searches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.errors import KafkaError

from memstream.topics.registry import (
    EXCHANGE_RETENTION_MS,
    REPLIES,
    REQUESTS,
    TopicSpec,
    consumer_group,
)
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.trim")

# What nobody replays and nothing explains later: the request/reply exchange.
TRANSIENT: tuple[TopicSpec, ...] = (REQUESTS, REPLIES)
KEEP_S = 120.0  # well under the topics' retention.ms, so the deletion is ours
REPLY_KEEP_S = 20.0  # a reply's client reads it at once (or has gone)
assert max(KEEP_S, REPLY_KEEP_S) * 1000 < EXCHANGE_RETENTION_MS  # noqa: S101


async def cut_offsets(consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition],
                      before_ms: int | dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Per partition, the first offset written at or after ``before_ms`` (everything before it
    may go; one time for all, or per partition), only where that removes something."""
    found = await consumer.offsets_for_times(
        before_ms if isinstance(before_ms, dict) else dict.fromkeys(tps, before_ms))
    starts = await consumer.beginning_offsets(list(tps))
    ends = await consumer.end_offsets(list(tps))
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        at = found.get(tp)
        cut = at.offset if at is not None else ends[tp]  # nothing newer: all of it may go
        if cut > starts[tp]:
            out[tp] = cut
    return out


def keep_of(spec: TopicSpec) -> float:
    """How long a transient topic's records stay on the broker."""
    return REPLY_KEEP_S if spec is REPLIES else KEEP_S


async def trim_once(settings: Settings, bootstrap: str, keep_s: float | None = None,
                    specs: Sequence[TopicSpec] = TRANSIENT) -> int:
    """Delete the records of ``specs`` older than ``keep_s`` (None: each topic's keep time,
    ``keep_of``); returns how many went."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                client_id=f"{settings.kafka.client_id}-trim")
    await consumer.start()
    await admin.start()
    try:
        await consumer.topics()
        tps = [TopicPartition(spec.name(settings), p) for spec in specs
               for p in sorted(consumer.partitions_for_topic(spec.name(settings)) or ())]
        if not tps:
            return 0
        starts = await consumer.beginning_offsets(tps)
        now = time.time()
        keeps = {spec.name(settings): keep_of(spec) if keep_s is None else keep_s
                 for spec in specs}
        cuts = await cut_offsets(consumer, tps, {
            tp: int((now - keeps[tp.topic]) * 1000) for tp in tps})
        # a request no worker has taken yet stays, however old (a client may still wait)
        asked = [tp for tp in cuts if tp.topic == REQUESTS.name(settings)]
        if asked:
            taken = await admin.list_consumer_group_offsets(
                consumer_group(settings, REQUESTS), partitions=asked)
            for tp in asked:
                meta = taken.get(tp)
                cuts[tp] = min(cuts[tp], meta.offset if meta is not None else -1)
        cuts = {tp: cut for tp, cut in cuts.items() if cut > starts[tp]}
        if not cuts:
            return 0
        await admin.delete_records({tp: RecordsToDelete(before_offset=cut)
                                    for tp, cut in cuts.items()}, timeout_ms=10_000)
        gone = sum(int(cut) - int(starts[tp]) for tp, cut in cuts.items())
        log.debug("trimmed %d transient records", gone)
        return gone
    finally:
        await admin.close()
        await consumer.stop()


async def trim_forever(settings: Settings, bootstrap: str, every_s: float,
                       keep_s: float | None = None) -> None:
    """``trim_once`` every ``every_s`` seconds; a failure is logged and tried again later."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await trim_once(settings, bootstrap, keep_s)
        except (KafkaError, OSError) as exc:
            log.warning("could not trim the transient topics (will try again): %s", exc)

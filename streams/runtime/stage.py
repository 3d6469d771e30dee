"""What every stage agent shares: its dependencies, retries, and dead-lettering.

Agents stay thin: they decode raw records here, call a pure logic function with
``Deps``, send the events it returns, and dead-letter what fails. A worker never
dies on one bad event. An outage is not a bad event: while a store or the broker
cannot be reached the stage pauses (its batch waits, nothing is committed) and retries
with backoff until it can, so dead letters only ever hold events that are wrong.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
from pydantic import BaseModel, ValidationError

from memstream.security.signing import Verifier
from memstream.sinks.ports import StoreUnavailable
from memstream.streams import metering
from memstream.streams.runtime.foreground import Foreground
from memstream.streams.runtime.tracing import stage_span, stamp
from memstream.streams.runtime.trust import verify_record
from memstream.topics.events import DeadLetter, Event, MemoryUpdate, Origin
from memstream.topics.ids import derived_event_id
from memstream.topics.limits import check_content, check_encoded, check_raw
from memstream.topics.registry import DEAD_LETTER, MEMORY_UPDATES, TopicSpec
from memstream.topics.sealing import unseal
from memstream.topics.settings import LimitsSettings, Settings, WorkerSettings

if TYPE_CHECKING:
    from memstream.sinks.memory_store import MemoryStore
    from memstream.sinks.query import MemoryQuery
    from memstream.streams.embed.port import Embedder
    from memstream.streams.llm.port import LLM
    from memstream.streams.runtime.views import ViewMap

log = logging.getLogger("memstream.streams")

Clock = Callable[[], datetime]
E = TypeVar("E", bound=BaseModel)


# Original bytes a dead letter carries at most, by default: half the default event limit.
DEFAULT_LETTER_PAYLOAD = LimitsSettings().event_bytes // 2


class PermanentError(Exception):
    """A failure that retrying cannot fix (a rejected command, a missing node): dead-letter now."""


# Failures that say a dependency is down, not that the event is wrong.
OUTAGES: tuple[type[BaseException], ...] = (
    StoreUnavailable, ConnectionError, KafkaConnectionError, KafkaTimeoutError,
    NodeNotReadyError,
)
# Longest wait between two attempts while paused, and how often a pause is logged.
OUTAGE_BACKOFF_MAX_S = 2.0
OUTAGE_LOG_EVERY_S = 30.0


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` or anything it was raised from says a store or the broker is down."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OUTAGES):
            return True
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__
                                          else current.__context__)
    return False


class Pause:
    """Waits of one paused stage: exponential backoff up to a cap, logged now and then."""

    def __init__(self, stage: str, backoff_s: float) -> None:
        self.stage = stage
        self.delay = max(backoff_s, 0.01)
        self.since: float | None = None
        self._logged = 0.0

    async def wait(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning("%s: paused, a dependency is unreachable (%s: %s); retrying until "
                        "it is back, nothing is dead-lettered meanwhile", self.stage,
                        type(error).__name__, error)
            self._logged = now
        elif now - self._logged >= OUTAGE_LOG_EVERY_S:
            log.warning("%s: still paused after %.0fs (%s)", self.stage, now - self.since, error)
            self._logged = now
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, OUTAGE_BACKOFF_MAX_S)

    def resumed(self) -> None:
        if self.since is not None:
            log.warning("%s: resumed after a pause of %.1fs", self.stage,
                        time.monotonic() - self.since)
            self.since = None


class _Counter(Protocol):
    def inc(self, amount: float = ...) -> None: ...


class WorkerOps(Protocol):
    """What stage logic reports to, and reads from, the worker's metrics
    (``streams.ops.metrics.WorkerMetrics``)."""

    @property
    def search_degraded(self) -> _Counter: ...

    def search(self, mode: str, seconds: float) -> None: ...

    def extraction_lag(self) -> int | None: ...

    def turns_ingested(self, turns: int) -> None: ...


@dataclass
class Deps:
    """Everything a stage's logic may use, built once per worker.

    ``store`` is the only way to change memory (graph and vectors as one unit, retried);
    ``query`` reads (``store.query``: the same stores, no write methods)."""

    settings: Settings
    llm: LLM
    embedder: Embedder
    store: MemoryStore
    clock: Clock
    bootstrap: str | None = None  # the broker, for stages that read the log (replay)
    views: ViewMap | None = None  # promoted cubes: which views answer a cube's reads
    # Commands carried out by a part of the worker that drives the stages themselves (replay,
    # promote, drop_views: ``streams.replay``), by command name; wired by ``streams.worker``
    # so the command stage never imports what imports it.
    command_handlers: dict[str, Callable[[Any, Deps], Awaitable[list[Outgoing]]]] = field(
        default_factory=dict)

    ops: WorkerOps | None = None  # the worker's metrics (and sampled lag), if measured
    # the requests being answered now: background work of the search caches lets them go first
    foreground: Foreground = field(default_factory=Foreground)

    @property
    def query(self) -> MemoryQuery:
        return self.store.query

    @cached_property
    def verifier(self) -> Verifier | None:
        """Checks consumed events' signatures (None: no keys configured, all are trusted)."""
        return Verifier.of(self.settings.security)


@dataclass(frozen=True)
class Outgoing:
    """An event a logic function wants published, and where."""

    spec: TopicSpec
    event: Event
    key: bytes | None = None  # None: the event's cube id
    topic: str | None = None  # None: the spec's topic (a reply may name its own)
    partition: int | None = None  # None: by key
    # done once every output of the batch is acknowledged, before its offsets are committed:
    # an action that must never happen unannounced (an eviction is announced, then done)
    then: Callable[[], Awaitable[object]] | None = field(default=None, compare=False)
    # the trace context it carries (``streams.runtime.tracing.stamp``; empty: the sender's)
    headers: tuple[tuple[str, bytes], ...] = field(default=(), compare=False)
    # the event as ``spec`` encodes it, when the sender encoded it already (a reply's size
    # is checked on its encoding): sent as it is
    value: bytes | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RawRecord:
    """What an agent hands over: bytes and their position, independent of faust."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()  # signature, trace context
    timestamp_ms: int | None = None  # when it entered the log (Kafka's record timestamp)


@dataclass(frozen=True)
class Record(Generic[E]):
    """A decoded input record with its position in the log."""

    value: E
    origin: Origin
    raw: RawRecord



@dataclass
class StageStats:
    processed: int = 0
    dead_lettered: int = 0
    retries: int = 0
    paused: int = 0  # attempts that waited for an unreachable store or broker
    in_flight: int = 0  # batches being handled right now (the optimizer yields to ingestion)
    by_error: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latency: Any = None  # a histogram observing each cube batch's handling time (metrics)


def dead_letter(
    stage: str,
    raw: RawRecord,
    error: BaseException,
    attempts: int,
    clock: Clock,
    event: BaseModel | None = None,
    max_payload: int = DEFAULT_LETTER_PAYLOAD,
) -> Outgoing:
    """A DeadLetter carrying the stage, the error text and the original payload.

    A payload over ``max_payload`` bytes is cut (and the error says so): the letter itself
    must fit under the broker's message limit, escaped JSON and all."""
    payload = raw.value or b""
    with contextlib.suppress(ValidationError):  # the letter itself is sealed with the cube's key
        opened = unseal(payload)
        payload = opened if isinstance(opened, bytes) else opened.encode()
    cut = ""
    if len(payload) > max_payload:
        cut = f" [payload cut to its first {max_payload:,} of {len(payload):,} bytes]"
        payload = payload[:max_payload]
    try:
        text, encoding = payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(payload).decode("ascii"), "base64"
    key_text = raw.key.decode("utf-8", errors="replace") if raw.key else None
    user_id = getattr(event, "user_id", None) or key_text or "unknown"
    cube_id = getattr(event, "cube_id", None) or key_text or "unknown"
    message = (str(error) if isinstance(error, ValidationError) else f"{error}") + cut
    letter = DeadLetter(
        user_id=user_id,
        cube_id=cube_id,
        occurred_at=clock(),
        stage=stage,
        error=message or type(error).__name__,
        error_type=type(error).__name__,
        original_topic=raw.topic,
        original_partition=raw.partition,
        original_offset=raw.offset,
        original_key=key_text,
        payload=text,
        payload_encoding=encoding,  # type: ignore[arg-type]
        attempts=attempts,
    )
    return Outgoing(DEAD_LETTER, letter, key=raw.key)


def budget_update(notice: metering.BudgetNotice, cause: Event, clock: Clock) -> MemoryUpdate:
    """The announcement that a cube's stage ran out of LLM budget (once per period and stage;
    a redelivery re-sends it under the same event id)."""
    doing = "uses the rules stand-in" if notice.action == "rules" else \
        "defers its events to the dead-letter topic (re-drive them later)"
    return MemoryUpdate(
        event_id=derived_event_id("budget_exceeded", notice.cube_id, notice.period,
                                  notice.stage),
        user_id=cause.user_id, cube_id=notice.cube_id, occurred_at=clock(),
        action="budget_exceeded", stage=notice.stage, cause_event_id=cause.event_id,
        reason=f"LLM token budget spent: {notice.spent} of {notice.budget} tokens for "
               f"{notice.period}; {notice.stage} {doing} until the period ends")


def decode(spec: TopicSpec, raw: RawRecord, limits: LimitsSettings) -> BaseModel:
    """One raw record as its event: size and nesting checked before parsing, content after.

    Raises ``ValueError`` (``LimitExceeded`` for a limit), ``ValidationError``, or
    ``RecursionError`` should a parser still recurse too deep."""
    if raw.value is None:
        raise ValueError("empty record value (tombstone) on a non-compacted topic")
    check_encoded(raw.value, limits)
    opened = unseal(raw.value)  # sealed and compressed values are binary: checked opened
    check_raw(opened if isinstance(opened, bytes) else opened.encode(), limits)
    value = spec.validate(opened)
    check_content(value, limits)
    return value


def decode_batch(
    stage: str, spec: TopicSpec, raws: Sequence[RawRecord], clock: Clock,
    limits: LimitsSettings | None = None, verifier: Verifier | None = None,
) -> tuple[list[Record[Any]], list[Outgoing]]:
    """Split raw records into valid events and dead letters (bad JSON or schema, over a
    limit, a signature ``verifier`` refuses): dead-lettered at once, since retrying cannot
    make them valid."""
    limits = limits or LimitsSettings()
    good: list[Record[Any]] = []
    dead: list[Outgoing] = []
    for raw in raws:
        try:
            value = decode(spec, raw, limits)
            verify_record(verifier, raw, value)  # before any access check
        except (ValidationError, ValueError, RecursionError) as exc:
            log.warning("%s: dead-lettering %s[%d]@%d: %s", stage, raw.topic, raw.partition,
                        raw.offset, exc)
            dead.append(dead_letter(stage, raw, exc, attempts=1, clock=clock,
                                    max_payload=limits.event_bytes // 2))
            continue
        origin = Origin(topic=raw.topic, partition=raw.partition, offset=raw.offset)
        good.append(Record(value, origin, raw))
    return good, dead


async def with_retries(
    stage: str,
    fn: Callable[[], Awaitable[list[Outgoing]]],
    retries: int,
    backoff_s: float,
    stats: StageStats | None = None,
) -> tuple[list[Outgoing], BaseException | None, int]:
    """Run ``fn`` with bounded retries; returns (outputs, last error or None, attempts).

    An outage (``is_outage``) does not use up the retries: the call pauses, retrying with
    backoff for as long as the dependency stays down."""
    attempt = 0
    pause = Pause(stage, backoff_s)
    while True:
        attempt += 1
        try:
            out = await fn()
            pause.resumed()
            return out, None, attempt
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - errors are data: they go to the dead-letter topic
            if is_outage(exc) and not isinstance(exc, PermanentError):
                if stats is not None:
                    stats.paused += 1
                attempt -= 1
                await pause.wait(exc)
                continue
            if attempt > retries or isinstance(exc, PermanentError):
                return [], exc, attempt
            if stats is not None:
                stats.retries += 1
            log.warning("%s: attempt %d failed (%s: %s); retrying", stage, attempt,
                        type(exc).__name__, exc)
            await asyncio.sleep(backoff_s * (2 ** (attempt - 1)))


def group_by_cube(records: Sequence[Record[Any]]) -> dict[str, list[Record[Any]]]:
    """Records per cube, each list in log order (one cube's events are ordered)."""
    groups: dict[str, list[Record[Any]]] = defaultdict(list)
    for record in records:
        groups[record.value.cube_id].append(record)
    return dict(groups)


CubeLogic = Callable[[Sequence[Record[Any]]], Awaitable[list[Outgoing]]]


def _bind(logic: CubeLogic, record: Record[Any]) -> Callable[[], Awaitable[list[Outgoing]]]:
    async def run() -> list[Outgoing]:
        return await logic([record])

    return run


def make_batch_handler(
    stage: str,
    spec: TopicSpec,
    logic: CubeLogic,
    worker: WorkerSettings,
    clock: Clock,
    stats: StageStats,
    limits: LimitsSettings | None = None,
    verifier: Verifier | None = None,
) -> Callable[[Sequence[RawRecord]], Awaitable[list[Outgoing]]]:
    """Decode, run ``logic`` per cube (cubes concurrently, each in log order), dead-letter failures.

    A cube's batch is retried as a whole; if it still fails, its records are retried one
    by one so a single poisonous event is dead-lettered and the rest go through.
    """
    retries = worker.stage_retries
    backoff = worker.retry_backoff_s

    async def run_cube(records: list[Record[Any]]) -> list[Outgoing]:
        # The scope tells the metered LLM whose tokens these are (this runs in its own task).
        scope = metering.enter(stage, records[0].value.cube_id)
        started = time.perf_counter()
        with stage_span(stage, records):  # its outputs carry its trace context
            out = stamp(await run_cube_logged(records))
        if stats.latency is not None:
            stats.latency.observe(time.perf_counter() - started)
        return out + [Outgoing(MEMORY_UPDATES, budget_update(n, records[0].value, clock))
                      for n in scope.notices]

    async def run_cube_logged(records: list[Record[Any]]) -> list[Outgoing]:
        out, error, _ = await with_retries(stage, lambda: logic(records), retries, backoff, stats)
        if error is None:
            return out
        if len(records) == 1:
            singles = [(records[0], error)]
            out = []
        else:
            out, singles = [], []
            for record in records:
                one, err, _ = await with_retries(
                    stage, _bind(logic, record), retries, backoff, stats
                )
                out.extend(one)
                if err is not None:
                    singles.append((record, err))
        for record, err in singles:
            log.error("%s: dead-lettering event %s after %d attempts: %s", stage,
                      getattr(record.value, "event_id", "?"), retries + 1, err)
            stats.dead_lettered += 1
            stats.by_error[type(err).__name__] += 1
            out.append(dead_letter(stage, record.raw, err, retries + 1, clock, record.value))
        return out

    async def handle(raws: Sequence[RawRecord]) -> list[Outgoing]:
        good, dead = decode_batch(stage, spec, raws, clock, limits, verifier)
        stats.dead_lettered += len(dead)
        results = await asyncio.gather(*(run_cube(rs) for rs in group_by_cube(good).values()))
        return dead + [o for result in results for o in result]

    return handle

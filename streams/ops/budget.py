"""LLM cost governance: every model call metered per stage and cube, token budgets per cube.

Where the spent count lives: in the worker, per (cube, period), as a ledger of calls keyed
by what was asked (task name + its typed context without ``now``, hashed). A redelivered
or retried event asks the same questions, so its calls replace their earlier entries
instead of adding to the count, and a question already paid for is asked again even over
budget: a redelivered batch takes the same path as the first delivery, and each distinct
question counts once.
The ledger is kept in the graph store (one ``LLMSpend`` record per cube, period and call,
an idempotent upsert), read once per cube and period by the worker handling the cube: a
restarted worker, or one taking a partition over, resumes the count and recognises the
calls it redelivers. All of a cube's events share a partition, so one worker at a time
spends a cube's budget (search requests of the cube may run on the same worker).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import ValidationError

from memstream.kafka import tracing
from memstream.sinks.lru import LRU
from memstream.streams import metering
from memstream.streams.llm.port import LLM, Ctx, LLMError, LLMUsage, Resp, Task
from memstream.streams.llm.rules import stand_in
from memstream.streams.metering import BudgetNotice
from memstream.streams.runtime.stage import PermanentError
from memstream.topics.settings import GovernanceSettings

if TYPE_CHECKING:
    from memstream.sinks.ports import GraphStore
    from memstream.streams.ops.metrics import WorkerMetrics

log = logging.getLogger("memstream.budget")
CLOCK_FIELDS = frozenset({"now"})  # context fields holding the time of processing
# Stages whose model answers are journaled: what they ask follows from the log, so a
# redelivered or replayed input finds its answer on record and asks nothing again.
JOURNALED_STAGES = frozenset({"extraction", "memory.add", "reorganize", "optimizer", "replay"})


class BudgetDeferred(PermanentError):
    """The cube spent its token budget and ``over_budget`` is ``defer``: dead-letter the event
    (re-drive it in a later period)."""


class BudgetFallback(LLMError):
    """Raised for search when over budget: search's own fallback (fast) takes over."""


def period_of(when: datetime, period: str) -> str:
    """The UTC calendar period ``when`` falls in: ``2026-11-24T13``, ``2026-11-24``, ``2026-11``."""
    match period:
        case "hour":
            return when.strftime("%Y-%m-%dT%H")
        case "month":
            return when.strftime("%Y-%m")
    return when.strftime("%Y-%m-%d")


def call_key(task: Task[Ctx, Resp], ctx: Ctx) -> str:
    """The question a call asks: its task and typed context, without the processing time
    (``now``) that contexts carry for resolving relative dates, so a redelivery matches."""
    fields = set(type(ctx).model_fields) & CLOCK_FIELDS
    text = ctx.model_dump_json(exclude=fields or None)
    return hashlib.sha256(f"{task.name}\0{text}".encode()).hexdigest()


class Ledger:
    """Tokens spent per (cube, period), each distinct call counted once.

    With ``max_books`` / ``max_calls`` it holds the books of the cubes that called last, at
    most that many (cube, period) books and calls in all: a book let go is read from the
    store again on the cube's next call (the store has every call: each is written there as
    it is counted). Without them (no store) it holds every book."""

    def __init__(self, max_books: int | None = None, max_calls: int | None = None) -> None:
        self.calls: LRU[tuple[str, str], dict[str, int]] = LRU(
            max_books, max_weight=max_calls, weigh=len if max_calls is not None else None,
            on_evict=self._evicted)
        self.announced: set[tuple[str, str, str]] = set()
        self.loaded: set[tuple[str, str]] = set()  # read from the store
        self.locks: dict[str, asyncio.Lock] = {}  # per cube with a budget, while its book is held

    def spent(self, cube_id: str, period: str) -> int:
        return sum((self.calls.get((cube_id, period)) or {}).values())

    def paid(self, cube_id: str, period: str, key: str) -> bool:
        """Whether this question was already asked (and counted) for the cube this period."""
        return key in (self.calls.get((cube_id, period)) or {})

    def book(self, cube_id: str, period: str) -> dict[str, int]:
        return self.calls.setdefault((cube_id, period), dict)

    def record(self, cube_id: str, period: str, key: str, tokens: int) -> None:
        self.book(cube_id, period)[key] = tokens
        self.calls.reweigh((cube_id, period))
        for old in [k for k in self.calls if k[0] == cube_id and k[1] != period]:
            self.calls.pop(old)  # earlier periods are closed
            self.loaded.discard(old)
        if any(a[1] != period for a in self.announced):
            self.announced = {a for a in self.announced if a[1] == period}

    def _evicted(self, key: tuple[str, str], _book: dict[str, int]) -> None:
        self.loaded.discard(key)  # read again from the store on the cube's next call
        lock = self.locks.get(key[0])
        if lock is not None and not lock.locked():
            del self.locks[key[0]]


class MeteredLLM:
    """Wraps the configured LLM: meters each call, and enforces the cubes' token budgets."""

    def __init__(self, inner: LLM, settings: GovernanceSettings, clock: Callable[[], datetime],
                 metrics: WorkerMetrics | None = None, graph: GraphStore | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.graph = graph  # where the ledger is kept (None: in this process only)
        self.ledger = Ledger(settings.ledger_cubes, settings.ledger_calls) if graph is not None \
            else Ledger()
        self.usage: LLMUsage = inner.usage  # the provider's own counters (same object)

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        scope = metering.current()
        if scope is None or self.name == "rules" \
                or self.settings.budget_of(scope.cube_id) is None:
            return await self._run(task, ctx)
        # A cube with a budget asks one question at a time: each is checked against what the
        # ones before it spent (overlapping calls would all pass the check, then overspend).
        async with self.ledger.locks.setdefault(scope.cube_id, asyncio.Lock()):
            return await self._run(task, ctx)

    async def _run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        scope = metering.current()
        stage, cube = (scope.stage, scope.cube_id) if scope else ("other", "")
        budget = self.settings.budget_of(cube) if scope else None
        period = period_of(self.clock(), self.settings.budget_period)
        key = call_key(task, ctx)
        if budget is not None and self.name != "rules":
            await self._load(cube, period)
        if budget is not None and self.name != "rules" \
                and not self.ledger.paid(cube, period, key):  # a redelivery asks again
            spent = self.ledger.spent(cube, period)
            if spent >= budget:
                return self._over_budget(task, ctx, scope, period, spent, budget)
        journal = self._journal_key(task, ctx, key, scope)
        if journal is not None:
            assert self.graph is not None  # noqa: S101 - a journal needs the store
            if (recorded := await self._recorded(task, cube, journal)) is not None:
                if self.metrics is not None:
                    self.metrics.llm_call(stage, cube, task.name, "recorded", 0, 0, 0.0)
                return recorded
        call = metering.start_call()
        started = time.perf_counter()
        outcome = "ok"
        try:
            with tracing.span(f"memstream.llm {task.name}", {
                    "gen_ai.operation.name": task.name, "gen_ai.system": self.name}) as span:
                answer = await self.inner.run(task, ctx)
                span.set_attribute("gen_ai.usage.input_tokens", call.prompt)
                span.set_attribute("gen_ai.usage.output_tokens", call.completion)
            if journal is not None:
                assert self.graph is not None  # noqa: S101 - a journal needs the store
                await self.graph.record_llm_answer(cube, journal, answer.model_dump_json())
            return answer
        except LLMError:
            outcome = "error"
            raise
        finally:
            if budget is not None and call.total:
                self.ledger.record(cube, period, key, call.total)
                if self.graph is not None:
                    await self.graph.record_llm_spend(cube, period, key, call.total)
            if self.metrics is not None:
                self.metrics.llm_call(stage, cube, task.name, outcome, call.prompt,
                                      call.completion, time.perf_counter() - started)
                if budget is not None:
                    self.metrics.budget_spent(cube, self.ledger.spent(cube, period))

    def _journal_key(self, task: Task[Ctx, Resp], ctx: Ctx, key: str,
                     scope: metering.Scope | None) -> str | None:
        """The question's key in the answer journal: ingestion's questions to a model only
        (what it asks is a function of the log), with the model and the task's instructions,
        so a new model or prompt asks anew."""
        if self.graph is None or self.name == "rules" or scope is None \
                or scope.stage not in JOURNALED_STAGES:
            return None
        system = "".join(m["content"] for m in task.render(ctx) if m["role"] == "system")
        model = str(getattr(self.inner, "model", ""))
        return hashlib.sha256(f"{model}\0{key}\0{system}".encode()).hexdigest()

    async def _recorded(self, task: Task[Ctx, Resp], cube: str, journal: str) -> Resp | None:
        """The answer an earlier delivery of the same input got, if it is on record."""
        assert self.graph is not None  # noqa: S101 - a journal needs the store
        text = await self.graph.llm_answer(cube, journal)
        if text is None:
            return None
        try:
            return task.response.model_validate_json(text)
        except ValidationError:  # recorded by an older answer model: ask again
            return None

    async def _load(self, cube_id: str, period: str) -> None:
        """The cube's spend this period as the store has it (once per worker and period)."""
        if self.graph is None or (cube_id, period) in self.ledger.loaded:
            return
        stored = await self.graph.llm_spend(cube_id, period)
        book = self.ledger.book(cube_id, period)
        for key, tokens in stored.items():
            book.setdefault(key, tokens)
        self.ledger.calls.reweigh((cube_id, period))
        self.ledger.loaded.add((cube_id, period))

    def _over_budget(self, task: Task[Ctx, Resp], ctx: Ctx, scope: metering.Scope | None,
                     period: str, spent: int, budget: int) -> Resp:
        assert scope is not None  # noqa: S101 - a budget needs a cube
        action = "rules" if scope.stage == "search" else self.settings.over_budget
        key = (scope.cube_id, period, scope.stage)
        if key not in self.ledger.announced:
            self.ledger.announced.add(key)
            scope.notices.append(BudgetNotice(scope.cube_id, scope.stage, period, spent, budget,
                                              action))
            log.warning("cube %s spent %d of its %d LLM tokens for %s: %s now %s", scope.cube_id,
                        spent, budget, period, scope.stage,
                        "uses the rules stand-in" if action == "rules" else "defers its events")
        if self.metrics is not None:
            self.metrics.budget_exceeded(scope.cube_id, scope.stage, action)
        message = (f"cube {scope.cube_id!r} spent {spent} of its {budget} LLM tokens for "
                   f"{period}")
        if scope.stage == "search":
            raise BudgetFallback(task.name, message + "; searching without the model")
        if action == "defer":
            raise BudgetDeferred(message + "; event deferred (re-drive it in a later period)")
        return stand_in(task)(ctx)

    async def close(self) -> None:
        await self.inner.close()

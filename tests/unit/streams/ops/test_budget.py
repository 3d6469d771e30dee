"""Token budgets count each distinct question once: a redelivered event asks the same
questions, so replaying the log never spends a cube's budget twice (streams/ops/budget.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.streams import metering
from memstream.streams.llm.port import ChatMessage, LLMUsage, Task
from memstream.streams.llm.rules import STAND_INS
from memstream.streams.ops.budget import MeteredLLM, period_of
from memstream.topics.settings import GovernanceSettings


class Ctx(BaseModel):
    text: str
    now: datetime = datetime(2026, 11, 24, tzinfo=UTC)  # when it was asked: not the question


class Answer(BaseModel):
    source: str


def _render(ctx: Ctx) -> list[ChatMessage]:
    return [{"role": "user", "content": ctx.text}]


TASK = Task(name="demo", render=_render, response=Answer)


@pytest.fixture(autouse=True)
def demo_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules path a cube over budget falls back to, for this test's task."""
    monkeypatch.setitem(STAND_INS, TASK.name, lambda ctx: Answer(source="rules"))


class CountingModel:
    """A provider that reports 25 + 5 tokens per request, as the OpenAI provider does."""

    name = "openai"

    def __init__(self) -> None:
        self.usage = LLMUsage()

    async def run(self, task: Task[Ctx, Answer], ctx: Ctx) -> Answer:
        self.usage.calls += 1
        metering.add_tokens(25, 5)
        return Answer(source="model")

    async def close(self) -> None:
        return None


def _clock() -> datetime:
    return datetime(2026, 11, 24, 13, 5, tzinfo=UTC)


async def test_a_repeated_question_is_counted_once_and_the_budget_holds() -> None:
    model = CountingModel()
    llm = MeteredLLM(model, GovernanceSettings(cube_token_budgets={"c": 70}), _clock)
    metering.enter("extraction", "c")
    for text in ["one", "one", "two", "one", "two"]:  # a redelivery asks "one" again
        assert (await llm.run(TASK, Ctx(text=text))).source == "model"
    assert llm.ledger.spent("c", "2026-11-24") == 60  # "one" and "two", once each
    assert (await llm.run(TASK, Ctx(text="three"))).source == "model"  # 60 < 70: allowed
    assert (await llm.run(TASK, Ctx(text="four"))).source == "rules"  # 90 >= 70: not sent
    assert model.usage.calls == 6
    # a redelivered question already paid for (asked later: another `now`) is still
    # answered by the model, and not counted again
    later = datetime(2026, 11, 24, 18, tzinfo=UTC)
    assert (await llm.run(TASK, Ctx(text="three", now=later))).source == "model"
    assert llm.ledger.spent("c", "2026-11-24") == 90 and model.usage.calls == 7
    scope = metering.current()
    assert scope is not None and len(scope.notices) == 1
    assert (scope.notices[0].spent, scope.notices[0].budget) == (90, 70)


def test_periods_are_utc_calendar_periods() -> None:
    when = _clock()
    assert [period_of(when, p) for p in ("hour", "day", "month")] == \
        ["2026-11-24T13", "2026-11-24", "2026-11"]


async def test_a_restarted_worker_resumes_the_count_from_the_store() -> None:
    graph = InMemoryGraphStore()  # passes the same contract suite as FalkorDB and Neo4j
    settings = GovernanceSettings(cube_token_budgets={"c": 70})
    first = MeteredLLM(CountingModel(), settings, _clock, graph=graph)
    metering.enter("extraction", "c")
    for text in ["one", "two"]:
        await first.run(TASK, Ctx(text=text))
    # a new worker (empty memory) takes over the cube: it knows "one" and "two" are paid
    model = CountingModel()
    second = MeteredLLM(model, settings, _clock, graph=graph)
    # redelivered: answered from the journal the first worker kept, not asked again
    assert (await second.run(TASK, Ctx(text="two"))).source == "model"
    assert (await second.run(TASK, Ctx(text="three"))).source == "model"  # 60 < 70
    assert (await second.run(TASK, Ctx(text="four"))).source == "rules"  # 90 >= 70
    assert second.ledger.spent("c", "2026-11-24") == 90 and model.usage.calls == 1
    assert await graph.llm_spend("c", "2026-11-24") == second.ledger.calls.peek(("c", "2026-11-24"))


def _bounded(graph: InMemoryGraphStore, model: CountingModel, **bounds: int) -> MeteredLLM:
    settings = GovernanceSettings(token_budget=70, **bounds)
    return MeteredLLM(model, settings, _clock, graph=graph)


async def _ask(llm: MeteredLLM, cube: str, text: str) -> str:
    metering.enter("extraction", cube)
    return (await llm.run(TASK, Ctx(text=text))).source


async def test_a_worker_holds_the_books_of_a_bounded_number_of_cubes() -> None:
    llm = _bounded(InMemoryGraphStore(), CountingModel(), ledger_cubes=3, ledger_calls=1_000)
    for c in range(30):
        for text in ("one", "two"):
            await _ask(llm, f"cube{c}", text)
        assert len(llm.ledger.calls) <= 3 and len(llm.ledger.locks) <= 3
    by_calls = _bounded(InMemoryGraphStore(), CountingModel(), ledger_calls=5)
    for c in range(30):
        for text in ("one", "two"):
            await _ask(by_calls, f"cube{c}", text)
        assert by_calls.ledger.calls.weight <= 5
    assert len(by_calls.ledger.calls) == 2


async def test_a_cube_whose_book_was_let_go_keeps_its_count_and_its_paid_questions() -> None:
    """The same answers as a worker that never let the book go: the count and the calls
    paid for come back from the store."""
    model = CountingModel()
    llm = _bounded(InMemoryGraphStore(), model, ledger_cubes=2)
    for text in ("one", "two"):
        assert await _ask(llm, "c", text) == "model"
    for other in ("x", "y", "z"):
        await _ask(llm, other, "hello")
    assert ("c", "2026-11-24") not in llm.ledger.calls  # let go
    assert await _ask(llm, "c", "one") == "model"  # paid for: from the journal, not counted
    assert llm.ledger.spent("c", "2026-11-24") == 60
    assert await _ask(llm, "c", "three") == "model"  # 60 < 70
    for other in ("x", "y", "z"):
        await _ask(llm, other, "again")
    assert await _ask(llm, "c", "four") == "rules"  # 90 >= 70, after a second reload
    assert llm.ledger.spent("c", "2026-11-24") == 90 and model.usage.calls == 9


async def test_the_cube_that_called_least_recently_goes_first() -> None:
    llm = _bounded(InMemoryGraphStore(), CountingModel(), ledger_cubes=3)
    for cube in ("a", "b", "c", "a", "d"):  # a called again: b is the oldest
        await _ask(llm, cube, "hello")
    assert sorted(cube for cube, _ in llm.ledger.calls) == ["a", "c", "d"]

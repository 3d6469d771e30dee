"""The memory scheduler (streams/scheduler/logic.py): routing, and a query planning the next
working memory that the sink then applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstream.streams.core.working_memory import apply_replacements, apply_working_memory
from memstream.streams.memory.logic import add_memories
from memstream.streams.prompts.scheduler import RETRIEVAL_DECISION, DecisionResponse
from memstream.streams.runtime.stage import Deps
from memstream.streams.scheduler.logic import ScheduleRejected, Step, handle, route, split_top_k
from memstream.streams.scheduler.planning import current_working_memory
from memstream.streams.scheduler.state import CubeState
from memstream.topics.events import (
    ExtractedMemory,
    MemoryUpdate,
    ScheduleMessage,
    WorkingMemoryReplacement,
)
from memstream.topics.settings import Settings
from tests.support.doubles import ManualClock, ScriptedLLM, events_of, memory_deps, record, remember
from tests.support.facts import FACTS_WITH_DIET as FACTS

CUBE = "dana"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}
NO_NEED = DecisionResponse(need_retrieval=False, reason="working memory is enough")


def query(text: str, **fields: Any) -> ScheduleMessage:
    return ScheduleMessage(**ME, label="query", content=text, **fields)


def fresh(deps: Deps, msg: ScheduleMessage) -> CubeState:
    return CubeState.new(msg, 0, deps.clock())


async def ask(deps: Deps, text: str, state: CubeState | None = None) -> Step:
    msg = query(text)
    return await handle("query", msg, state or fresh(deps, msg), deps)


def replacement(step: Step) -> WorkingMemoryReplacement:
    (event,) = events_of(step.outgoing, WorkingMemoryReplacement)
    return event


async def working(deps: Deps) -> list[str]:
    """The cube's working memory as an agent reads it: newest (first in the list) first."""
    return [w.memory for w in await deps.query.all_of_type(CUBE, "WorkingMemory")]


async def test_a_query_plans_working_memory_from_related_memories(tmp_path: Path) -> None:
    clock = ManualClock()
    deps = memory_deps(tmp_path, clock=clock)
    await remember(deps, CUBE, *FACTS)
    step = await ask(deps, "What should I cook for dinner tonight?")
    event = replacement(step)
    texts = [i.memory for i in event.items]
    assert "The user's favourite dish is mushroom risotto." in texts
    assert "The user has been vegetarian since 2019." in texts
    assert "The user drives an old red Volvo to work." not in texts
    assert event.queries == ("What should I cook for dinner tonight?",)
    assert step.trace is not None and step.trace.retrieved
    # the state remembers the query and the retrieval, for the next turn
    assert [q.text for q in step.state.queries] == ["What should I cook for dinner tonight?"]
    assert step.state.last_retrieval_at == clock()
    assert step.state.replacement is not None
    assert step.state.replacement.refs == tuple(i.id for i in event.items)
    # the sink makes working memory exactly that list, in that order
    out = await apply_replacements([record(event)], deps)
    (announced,) = events_of(out, MemoryUpdate)
    assert announced.action == "working_memory_replaced"
    assert await working(deps) == texts


async def test_working_memory_never_exceeds_its_capacity(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, memory={"working_memory_capacity": 2})
    nodes = await remember(deps, CUBE, *FACTS)
    applied = await apply_working_memory(deps, CUBE, [n.id for n in nodes], deps.clock())
    assert len(applied.copy_ids) == 2
    assert await working(deps) == list(FACTS[:2])
    step = await ask(deps, "Tell me everything about the user's life.")
    assert len(replacement(step).items) <= 2


async def test_summaries_the_rules_stand_in_wrote_stay_out(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    facts = await remember(deps, CUBE, *FACTS[4:])
    (summary,) = await remember(deps, CUBE, "Food: risotto; vegetarian.",
                                hierarchy_level="concept", type="topic", written_by="rules")
    applied = await apply_working_memory(deps, CUBE, [summary.id, facts[0].id], deps.clock())
    assert applied.refused == [summary.id]
    assert await working(deps) == [FACTS[4]]
    step = await ask(deps, "What food does the user like?")
    assert summary.id not in {i.id for i in replacement(step).items}


async def test_a_redelivered_query_is_recorded_once_and_plans_the_same_event(
    tmp_path: Path,
) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    msg = query("What should I cook for dinner tonight?")
    first = await handle("query", msg, fresh(deps, msg), deps)
    again = await handle("query", msg, first.state, deps)
    assert len(again.state.queries) == 1
    assert replacement(again).event_id == replacement(first).event_id


async def test_no_retrieval_when_the_model_says_working_memory_suffices(tmp_path: Path) -> None:
    clock = ManualClock()
    deps = memory_deps(tmp_path, clock=clock, llm=ScriptedLLM({RETRIEVAL_DECISION.name: NO_NEED}),
                       scheduler={"retrieval_interval_s": 300})
    await remember(deps, CUBE, *FACTS)
    step = await ask(deps, "And what about tomorrow?")
    assert step.outgoing == [] and step.trace is not None and not step.trace.retrieved
    assert [q.text for q in step.state.queries] == ["And what about tomorrow?"]
    # ... until the timer is due: then it retrieves anyway
    clock.advance(seconds=301)
    timed = await ask(deps, "What should I cook for dinner tonight?", step.state)
    assert timed.trace is not None and timed.trace.retrieved
    assert "timer" in timed.trace.reason
    assert replacement(timed).items


async def test_a_query_without_text_is_rejected(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    with pytest.raises(ScheduleRejected, match="needs content"):
        await ask(deps, "   ")


async def test_an_answer_is_kept_for_the_next_decision(tmp_path: Path) -> None:
    clock = ManualClock()
    deps = memory_deps(tmp_path, clock=clock)
    msg = ScheduleMessage(**ME, label="answer", content="Try a mushroom risotto.")
    clock.advance(seconds=3)
    step = await handle("answer", msg, fresh(deps, msg), deps)
    assert step.outgoing == []
    assert (step.state.last_answer, step.state.last_answer_at) == ("Try a mushroom risotto.",
                                                                   clock())
    assert step.state.last_activity_at == clock()


async def test_memories_added_by_hand_are_announced(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS[:2])
    await add_memories([record(ExtractedMemory(**ME, memory=FACTS[2]))], deps)
    (copy,) = await deps.query.all_of_type(CUBE, "WorkingMemory")
    msg = ScheduleMessage(**ME, label="add", memory_ids=(nodes[0].id, copy.id, "unknown",
                                                         nodes[1].id))
    step = await handle("add", msg, fresh(deps, msg), deps)
    updates = events_of(step.outgoing, MemoryUpdate)
    assert [(u.action, u.node_id) for u in updates] == [("added", nodes[0].id),
                                                        ("added", nodes[1].id)]
    assert all(u.stage == "scheduler" for u in updates)


async def test_the_last_plan_stands_in_until_the_sink_has_applied_it(tmp_path: Path) -> None:
    """The sink is another agent, a batch behind: right after a plan, the scheduler builds on
    that plan, not on the working memory the graph still shows; once applied, on the graph;
    a plan never applied is trusted only for ``pending_replacement_s``."""
    clock = ManualClock()
    deps = memory_deps(tmp_path, clock=clock, scheduler={"pending_replacement_s": 10})
    await remember(deps, CUBE, *FACTS)
    first = await ask(deps, "What should I cook for dinner tonight?")
    last = first.state.replacement
    assert last is not None and await working(deps) == []  # not applied yet
    clock.advance(seconds=1)
    pending = await current_working_memory(deps, CUBE, last, clock())
    assert [e.ref for e in pending] == list(last.refs)
    await apply_replacements([record(replacement(first))], deps)
    applied = await current_working_memory(deps, CUBE, last, clock())
    assert [e.ref for e in applied] == list(last.refs)
    clock.advance(seconds=60)
    await deps.store.clear_cube(CUBE)  # e.g. erased meanwhile: the graph is the truth again
    assert await current_working_memory(deps, CUBE, last, clock()) == []


SETTINGS = Settings(kafka={"topic_prefix": "u."})


# --------------------------------------------------------------------------- routing


def test_each_schedule_topic_takes_only_its_own_label() -> None:
    for label in ("query", "answer", "add"):
        assert route(label, f"u.schedule.{label}", SETTINGS) == label
    with pytest.raises(ScheduleRejected, match="unknown schedule label 'remind'"):
        route("remind", "u.schedule.query", SETTINGS)
    with pytest.raises(ScheduleRejected,
                       match="label 'add' arrived on u.schedule.answer, which carries 'answer'"):
        route("add", "u.schedule.answer", SETTINGS)


def test_top_k_is_divided_among_the_evidence_at_least_one_each() -> None:
    assert split_top_k(10, 1) == 10
    assert split_top_k(10, 3) == 3
    assert split_top_k(10, 20) == 1

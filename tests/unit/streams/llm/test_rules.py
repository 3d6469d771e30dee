"""The ``rules`` provider (streams/llm/rules/): every model task has a deterministic stand-in,
the provider answers through that registry, and prompts import no heuristics."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

from memstream.streams import prompts as prompts_pkg
from memstream.streams.llm.port import Task
from memstream.streams.llm.rules import STAND_INS, RulesLLM, stand_in
from memstream.streams.prompts.conflict import RELATION_JUDGE, JudgeContext
from memstream.streams.prompts.fusion import FUSION, FusionContext
from memstream.streams.prompts.scheduler import KEYWORDS, KeywordContext, KeywordResponse
from tests.support.statements import T1, mem


async def test_rules_provider_runs_both_tasks() -> None:
    llm = RulesLLM()
    ctx = JudgeContext(existing=mem("The user lives in Berlin."),
                       new=mem("The user moved to Lisbon.", T1), similarity=0.85)
    answer = await llm.run(RELATION_JUDGE, ctx)
    fused = await llm.run(FUSION, FusionContext(existing=ctx.existing, new=ctx.new,
                                                relation=answer.relation))
    assert fused.memory == "The user moved to Lisbon."
    assert llm.usage.calls == 2 and llm.usage.failures == 0


PROMPTS = Path(prompts_pkg.__file__).parent


def prompt_tasks() -> dict[str, Task]:  # type: ignore[type-arg]
    tasks = {}
    for info in pkgutil.iter_modules([str(PROMPTS)]):
        module = importlib.import_module(f"{prompts_pkg.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Task):
                tasks[value.name] = value
    return tasks


def test_every_task_has_a_stand_in_and_every_stand_in_a_task() -> None:
    tasks = prompt_tasks()
    assert len(tasks) >= 13
    assert sorted(set(tasks) - set(STAND_INS)) == []  # a task the rules provider cannot answer
    assert sorted(set(STAND_INS) - set(tasks)) == []  # a stand-in for a task that is gone


def test_an_unknown_task_is_named() -> None:
    ghost = Task(name="nobody.asked", render=lambda ctx: [], response=KeywordResponse)
    with pytest.raises(KeyError, match="no rules stand-in for task 'nobody.asked'"):
        stand_in(ghost)


async def test_the_rules_provider_answers_through_the_registry() -> None:
    answer = await RulesLLM().run(KEYWORDS, KeywordContext(query="When is my flight to Lisbon?"))
    assert isinstance(answer, KeywordResponse)
    assert "Lisbon" in answer.keywords or "lisbon" in [k.lower() for k in answer.keywords]


@pytest.mark.parametrize("path", sorted(PROMPTS.glob("*.py")), ids=lambda p: p.name)
def test_prompt_modules_import_nothing_from_the_stand_ins(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert sorted(m for m in imported if ".llm.rules" in f".{m}") == []

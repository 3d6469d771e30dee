"""The optimizer's periodic run (streams/reorganize/optimize.py): concepts by subject, the
run position, and scopes that are running or dirty."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstream.streams.reorganize.optimize import Scope, Scopes, optimize_scope, run_scopes
from memstream.topics.events import MemoryUpdate
from tests.support.doubles import events_of, memory_deps, remember
from tests.support.paths import DATA

CUBE = "trip"
T0 = datetime(2026, 4, 2, 8, tzinfo=UTC)
AFTER = T0 + timedelta(days=1)  # an optimizer run's position in event time
SUBJECTS: dict[str, list[str]] = json.loads(
    (DATA / "three_subjects.json").read_text(encoding="utf-8"))[
        "subjects"]


async def test_optimization_groups_memories_by_subject_under_concepts(tmp_path: Path) -> None:
    """Six English memories of each subject, the end-to-end test's bar (which runs all sixty,
    a third in Chinese: seconds of embedding and loading the Chinese segmenter here)."""
    deps = memory_deps(tmp_path)
    subject_of: dict[str, str] = {}
    for subject, texts in SUBJECTS.items():
        for text in [t for t in texts if t.isascii()][:6]:
            subject_of[text] = subject
    await remember(deps, CUBE, *subject_of, at=T0)
    scope: Scope = (CUBE, CUBE, "LongTermMemory")
    out = await optimize_scope(deps, scope, AFTER)
    nodes = await deps.query.all_of_type(CUBE, "LongTermMemory")
    concepts = [n for n in nodes if n.metadata.hierarchy_level == "concept"]
    assert concepts
    majority = members_total = 0
    for concept in concepts:
        members = [c for c in await deps.query.children(CUBE, concept.id)
                   if c.metadata.hierarchy_level == "fact"]
        assert len(members) >= 2
        top, count = Counter(subject_of[m.memory] for m in members).most_common(1)[0]
        assert count / len(members) >= 0.75, (concept.memory, top, count, len(members))
        majority += count
        members_total += len(members)
    assert majority / members_total >= 0.9  # purity over all concepts
    announced = {u.node_id for u in events_of(out, MemoryUpdate) if u.action == "added"}
    assert {c.id for c in concepts} <= announced
    # a second run over the same members writes nothing new, and announces under the same ids
    before = await deps.query.export_cube(CUBE)
    again = await optimize_scope(deps, scope, AFTER)
    after = await deps.query.export_cube(CUBE)
    assert len(after.nodes) == len(before.nodes) and len(after.edges) == len(before.edges)
    assert {o.event.event_id for o in again} <= {o.event.event_id for o in out}


async def test_memories_after_the_run_position_are_left_for_a_later_run(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    food = [t for t in SUBJECTS["food"] if t.isascii()][:4]
    await remember(deps, CUBE, *food, at=AFTER + timedelta(hours=1))
    assert await optimize_scope(deps, (CUBE, CUBE, "LongTermMemory"), AFTER) == []
    assert all(n.metadata.hierarchy_level == "fact"
               for n in await deps.query.all_of_type(CUBE, "LongTermMemory"))


async def test_a_running_scope_is_skipped_and_a_run_clears_it(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *SUBJECTS["food"][:4], at=T0)
    scope: Scope = (CUBE, CUBE, "LongTermMemory")
    scopes = Scopes()
    scopes.mark(scope)
    scopes.running.add(scope)
    assert await run_scopes(deps, scopes, [scope], AFTER) == []
    assert scope in scopes.dirty and scopes.runs == 0
    scopes.running.clear()
    await run_scopes(deps, scopes, [scope], AFTER)
    assert scopes.runs == 1 and scope not in scopes.dirty and not scopes.running

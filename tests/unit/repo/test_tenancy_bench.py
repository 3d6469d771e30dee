"""bench/tenancy.py's accounting (bench/tenancy_data.py): cube sizes add up to the memories
asked for, each cube holds exactly its size in the shape the pipeline stores a chat (an
episode per chunk, its statements citing it and their turns, working-memory copies of the
newest statements), the Zipf access law makes a few cubes hot and the first search of
each cube the one marked cold, and a kept stack is reused only for the shape it holds."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from tenancy_data import (  # noqa: E402
    WORKING_CAPACITY,
    cube_data,
    cube_sizes,
    iter_jobs,
    make_pool,
    plan_cubes,
    pool_texts,
    zipf_order,
)
from tenancy_fill import Filled, keep_filled, kept, slices  # noqa: E402


def test_sizes_add_up_are_skewed_and_keep_the_floor() -> None:
    sizes = cube_sizes(1000, 100_000, 0.7)
    assert sum(sizes) == 100_000 and len(sizes) == 1000
    assert sizes == sorted(sizes, reverse=True)
    assert min(sizes) >= 10 and sizes[0] > 20 * int(np.median(sizes))


def test_a_cube_holds_its_size_in_the_shape_of_a_stored_chat() -> None:
    pool = make_pool(30, seed=1)
    episodes, facts = pool_texts(pool)
    assert len(episodes) == 30 and len(facts) == 90 and "{N}" not in "".join(episodes + facts)
    ep = np.ones((30, 4), dtype=np.float32)
    fa = np.ones((90, 4), dtype=np.float32)
    for plan in plan_cubes([10, 11, 57, 400], len(pool), seed=1):
        data = cube_data(plan, pool, ep, fa)
        nodes = [node for node, _ in data.rows]
        assert len(nodes) == plan.size and len({n.id for n in nodes}) == plan.size
        kinds = Counter(n.metadata.memory_type for n in nodes)
        assert kinds["WorkingMemory"] == min(WORKING_CAPACITY, plan.size // 5)
        assert kinds["EpisodicMemory"] == plan.chunks
        assert all(n.metadata.cube_id == plan.cube == n.metadata.user_id for n in nodes)
        assert all(plan.name in n.memory and "{N}" not in n.memory for n in nodes)
        episode_ids = {n.id for n in nodes if n.metadata.memory_type == "EpisodicMemory"}
        statements = [n for n in nodes if n.metadata.memory_type in ("UserMemory",
                                                                      "LongTermMemory")]
        assert {e.target for e in data.edges} <= episode_ids
        assert {e.source for e in data.edges} == {s.id for s in statements}
        for s in statements:  # its turn and its episode, as extraction cites them
            kinds_of = [r.kind for r in s.metadata.sources]
            assert kinds_of == ["message", "memory"]
        copies = [n for n in nodes if n.metadata.memory_type == "WorkingMemory"]
        assert {c.metadata.origin_id for c in copies} <= {s.id for s in statements}
        # written a slice at a time, every node comes after the nodes it cites
        position = {n.id: i for i, n in enumerate(nodes)}
        assert all(position[e.target] < position[e.source] for e in data.edges)
        assert all(position[str(c.metadata.origin_id)] < position[c.id] for c in copies)
        assert [r for part in slices(data.rows, 7) for r in part] == data.rows


def test_zipf_access_is_hot_at_the_head_and_each_cubes_first_search_is_cold() -> None:
    order = zipf_order(1000, 3000, 1.0, seed=3)
    counts = Counter(order).most_common()
    assert counts[0][1] > 100 and len(counts) > 300  # one hot cube, a long tail
    plans = plan_cubes(cube_sizes(1000, 20_000, 0.7), 20, seed=3)
    jobs = list(iter_jobs(plans, make_pool(20, seed=3), order, seed=3))
    assert sum(cold for _, _, cold in jobs) == len(counts)
    seen: set[str] = set()
    for cube, question, cold in jobs:
        assert cold == (cube not in seen) and question.endswith("?")
        seen.add(cube)


def test_a_kept_stack_is_reused_for_its_shape_only(tmp_path: Path) -> None:
    shape = {"cubes": 10, "memories": 500, "seed": 40}
    keep = tmp_path / "stack"
    assert kept(keep, shape) is None  # new: fill it
    keep.mkdir()
    assert kept(keep, shape) is None  # empty: fill it
    (keep / "milvus").mkdir()
    with pytest.raises(SystemExit, match="no finished fill"):
        kept(keep, shape)  # a fill that stopped half-way
    keep_filled(keep, Filled(shape, fill_s=12.5, rss={"after filling": 400.0}))
    again = kept(keep, shape)
    assert again is not None and again.fill_s == 12.5 and again.rss == {"after filling": 400.0}
    with pytest.raises(SystemExit, match="give another --keep DIR"):
        kept(keep, {**shape, "memories": 600})

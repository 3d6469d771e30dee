"""A worker's metrics (streams/ops/metrics.py) label at most ``metrics.cube_labels_max``
cubes, whatever the number of cubes it meters, and still count every call; stopping them
ends the lag sampler whatever its probe does with a cancel."""

from __future__ import annotations

import asyncio

from memstream.kafka.admin import Positions
from memstream.streams.ops.metrics import WorkerMetrics
from memstream.topics.settings import MetricsSettings, Settings


def metrics(**fields: object) -> WorkerMetrics:
    return WorkerMetrics(Settings(metrics=MetricsSettings(**fields)))  # type: ignore[arg-type]


def samples(m: WorkerMetrics, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in m.registry.collect() for s in family.samples
            if s.name == name]


def test_a_thousand_cubes_get_at_most_the_bound_of_labels_and_every_call_counts() -> None:
    m = metrics(cube_labels_max=5)
    for c in range(1_000):
        for task in ("extract", "merge"):
            m.llm_call("extraction", f"cube{c}", task, "ok", 100, 20, 0.1)
        m.budget_exceeded(f"cube{c}", "extraction", "rules")
    calls = samples(m, "memstream_llm_calls_total")
    assert {labels["cube"] for labels, _ in calls} == {f"cube{c}" for c in range(5)} | {""}
    assert sum(v for _, v in calls) == 2_000  # the worker's total, as `memstream status` sums
    tokens = samples(m, "memstream_llm_tokens_total")
    assert sum(v for labels, v in tokens if labels["kind"] == "prompt") == 200_000
    assert len({labels["cube"] for labels, _ in samples(m, "memstream_llm_call_seconds_count")}) \
        == 6
    over = samples(m, "memstream_llm_budget_exceeded_total")
    assert len(over) == 6 and sum(v for _, v in over) == 1_000
    # a labelled cube keeps its own series as others come and go
    m.llm_call("extraction", "cube3", "extract", "ok", 1, 1, 0.1)
    assert m.registry.get_sample_value("memstream_llm_calls_total", {
        "stage": "extraction", "cube": "cube3", "task": "extract", "outcome": "ok"}) == 2


def test_spend_is_reported_for_the_cubes_that_spent_last() -> None:
    m = metrics(cube_labels_max=3)
    for c in range(50):
        m.budget_spent(f"cube{c}", 10 * c)
        assert len(samples(m, "memstream_llm_budget_spent_tokens")) <= 3
    for cube in ("cube47", "cube49", "cube48", "cube1"):  # the three held spend again, in
        m.budget_spent(cube, 7)  # that order, then cube1: cube47's spend leaves the page
    shown = {labels["cube"]: v for labels, v in samples(m, "memstream_llm_budget_spent_tokens")}
    assert shown == {"cube48": 7, "cube1": 7, "cube49": 7}


def test_without_cube_labels_every_cube_shares_one_series() -> None:
    m = metrics(cube_labels=False)
    for c in range(10):
        m.llm_call("search", f"cube{c}", "parse", "ok", 0, 0, 0.01)
    assert samples(m, "memstream_llm_calls_total") == [
        ({"stage": "search", "cube": "", "task": "parse", "outcome": "ok"}, 10.0)]


async def test_stop_ends_the_sampler_even_when_a_lag_probe_swallows_the_cancel() -> None:
    """aiokafka's clients can swallow a cancel while closing; the sampler must still end (a
    worker's stop once waited 295 s on it)."""
    m = metrics(enabled=False, sample_interval_s=0.01)
    probing = asyncio.Event()
    swallowed: list[bool] = []

    async def probe() -> Positions:
        probing.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(True)  # once, as a library closing its client would
        return {}

    assert m.start(probe) is None
    await probing.wait()
    await asyncio.wait_for(m.stop(), timeout=10)
    assert swallowed  # the cancel did land in the probe, and the stop still returned

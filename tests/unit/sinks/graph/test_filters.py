"""Filters compiled to Cypher (sinks/graph/filters.py): user text only ever travels as
parameters, and times sort as the times do."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstream.sinks.graph import cypher
from memstream.sinks.ports import FILTER_FIELDS, Filter, StoreError

HOSTILE = [
    "x' OR 1=1 //",
    '"}) DETACH DELETE n //',
    "`Memory`) MATCH (m) DETACH DELETE m",
    "$injected_param",
    "a\\b\nc",
    "用户",
]


@pytest.mark.parametrize("dialect", [cypher.NEO4J, cypher.FALKORDB], ids=lambda d: d.name)
@pytest.mark.parametrize("value", HOSTILE)
def test_filter_values_travel_only_as_parameters(value: str, dialect: cypher.Dialect) -> None:
    filters = [
        Filter("key", "=", value),
        Filter("memory", "contains", value),
        Filter("tags", "in", [value, "other"]),
        Filter("session_id", "!=", value),
        Filter("type", "<", value),
    ]
    text, params = cypher.compile_filters(filters, dialect)
    query = cypher.find_nodes(text, limited=True)
    assert value not in query
    assert list(params.values()) == [value, value, [value, "other"], value, value]
    assert all(f"${name}" in text for name in params)


def test_filter_fields_outside_the_whitelist_are_refused() -> None:
    forged = object.__new__(Filter)  # skips Filter's own check, as a careless caller might
    object.__setattr__(forged, "field", "memory} ) DETACH DELETE n //")
    object.__setattr__(forged, "op", "=")
    object.__setattr__(forged, "value", "x")
    with pytest.raises(StoreError):
        cypher.compile_filters([forged], cypher.NEO4J)
    with pytest.raises(StoreError):
        cypher.count_by(["memory_type", "n.id) DETACH DELETE n //"], "")
    assert {"tags", "confidence", "updated_at"} <= FILTER_FIELDS


def test_string_ranges_avoid_falkordb_index_but_numbers_do_not() -> None:
    filters = [Filter("updated_at", "<", datetime(2025, 1, 1, tzinfo=UTC)),
               Filter("confidence", "<=", 50)]  # fmt: skip
    falkor, _ = cypher.compile_filters(filters, cypher.FALKORDB)
    neo, _ = cypher.compile_filters(filters, cypher.NEO4J)
    assert falkor == "toString(n.updated_at) < $p0 AND n.confidence <= $p1"
    assert neo == "n.updated_at < $p0 AND n.confidence <= $p1"


def test_iso_times_sort_as_the_times_do() -> None:
    rng = random.Random(7)
    zones = [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
    times = [
        datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**9))
        + timedelta(microseconds=rng.choice([0, 1, 999_999]))
        for _ in range(300)
    ]  # fmt: skip
    texts = [cypher.iso(t.astimezone(rng.choice(zones))) for t in times]
    assert len({len(t) for t in texts}) == 1
    assert sorted(texts) == [cypher.iso(t) for t in sorted(times)]
    with pytest.raises(StoreError):
        cypher.iso(datetime(2025, 1, 1))  # noqa: DTZ001

"""Metadata filters evaluated in Python on graph nodes, and the part a VectorStore evaluates.

Semantics match ``sinks.graph.cypher.compile_filters``: on lists ``contains`` is membership,
``in`` any overlap, ``=``/``!=`` compare whole lists; ``contains`` on text is a
substring test; ``!=`` matches a missing value; a range never matches a missing value.

``MemoryStore.search`` pushes the filters every VectorStore supports (fields a
``VectorRecord`` carries; ``contains`` only on tags) down to the vector search,
then checks every filter again here against the joined graph node, which is the
source of truth when a vector's copy of the metadata lags behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstream.sinks.ports import TIME_FIELDS, Filter, StoreError
from memstream.topics.models import MemoryItem

LIST_FIELDS = frozenset({"tags", "entities"})
# Filterable fields that every VectorRecord stores (cube_id is implied by the search).
VECTOR_STRING_FIELDS = frozenset(
    {"id", "user_id", "session_id", "memory_type", "status", "type", "key", "hierarchy_level"}
)
VECTOR_FIELDS = VECTOR_STRING_FIELDS | {"tags", "updated_at"}


def vector_filter_supported(flt: Filter) -> bool:
    """Whether every VectorStore evaluates ``flt`` itself (otherwise only the join applies it)."""
    if flt.field == "tags":
        return flt.op in ("contains", "in")
    if flt.field in VECTOR_FIELDS:
        return flt.op != "contains"
    return False


def as_datetime(value: object) -> datetime:
    """An aware datetime from a datetime or ISO-8601 string (``Z`` allowed)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise StoreError(f"not an ISO-8601 time: {value!r}") from exc
    if not isinstance(value, datetime):
        raise StoreError(f"expected a datetime or ISO-8601 string, got {type(value).__name__}")
    if value.tzinfo is None:
        raise StoreError(f"naive datetime {value.isoformat()} (give a timezone)")
    return value


def field_value(item: MemoryItem, field: str) -> Any:
    if field == "id":
        return item.id
    if field == "memory":
        return item.memory
    return getattr(item.metadata, field)


def _compare(op: str, left: Any, right: Any) -> bool:
    if right is None or isinstance(right, bool):
        raise StoreError(f"a range filter needs a value to compare with, got {right!r}")
    if left is None:
        return False
    try:
        match op:
            case "<":
                return bool(left < right)
            case "<=":
                return bool(left <= right)
            case ">":
                return bool(left > right)
            case _:
                return bool(left >= right)
    except TypeError as exc:
        raise StoreError(f"cannot compare {left!r} {op} {right!r}") from exc


def matches(item: MemoryItem, flt: Filter) -> bool:
    """Whether a node satisfies one filter (``None`` never satisfies a range)."""
    actual = field_value(item, flt.field)
    value = flt.value
    if flt.field in TIME_FIELDS:
        if flt.op == "in":
            assert isinstance(value, list | tuple | set | frozenset)  # noqa: S101  (Filter checks)
            return actual is not None and actual in {as_datetime(v) for v in value}
        if flt.op == "contains":
            raise StoreError(f"'contains' does not apply to the time field {flt.field}")
        value = None if value is None else as_datetime(value)
    if flt.field in LIST_FIELDS:
        if flt.op == "contains":
            return value in actual
        if flt.op == "in":
            assert isinstance(value, list | tuple | set | frozenset)  # noqa: S101
            return any(v in actual for v in value)
        if flt.op in ("=", "!=") and isinstance(value, list | tuple):
            return (tuple(value) == tuple(actual)) == (flt.op == "=")
        raise StoreError(f"filter {flt.field} {flt.op}: lists support =, != (a list), in, contains")
    if flt.op == "contains":
        if not isinstance(actual, str) or not isinstance(value, str):
            raise StoreError(f"'contains' on {flt.field} needs text")
        return value in actual
    return scalar_matches(flt.op, actual, value)


def scalar_matches(op: str, actual: Any, value: Any) -> bool:
    """``=``, ``!=``, ``in`` and the ranges on one scalar (``None`` never satisfies a range);
    shared by node filtering and the in-memory vector index."""
    match op:
        case "=":
            return bool(actual == value)
        case "!=":
            return bool(actual != value)
        case "in":
            assert isinstance(value, list | tuple | set | frozenset)  # noqa: S101
            return actual in value
        case _:
            return _compare(op, actual, value)


def matches_all(item: MemoryItem, filters: Sequence[Filter]) -> bool:
    return all(matches(item, f) for f in filters)

"""Metadata filters (``sinks.ports.Filter``) compiled to parameterized Cypher conditions.

Field names come only from ``FILTER_FIELDS``; values only ever travel as ``$p0``, ``$p1``...
parameters, converted to their stored form (times as fixed-width ISO-8601 UTC strings).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from memstream.sinks.graph.dialect import Dialect
from memstream.sinks.ports import FILTER_FIELDS, TIME_FIELDS, Filter, StoreError


def iso(value: datetime) -> str:
    """Fixed-width UTC ISO-8601 (``2024-05-01T12:00:00.000000+00:00``): sorts as it reads."""
    if value.tzinfo is None:
        raise StoreError(f"naive datetime {value.isoformat()} (give a timezone)")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


LIST_FIELDS: Final = frozenset({"tags", "entities"})
NUMBER_FIELDS: Final = frozenset({"confidence"})
BOOL_FIELDS: Final = frozenset({"frozen"})
_RANGE_OPS = {"<": "<", "<=": "<=", ">": ">", ">=": ">="}
_SCALAR = str | int | float | bool


def _param_value(field: str, value: object) -> object:
    """The stored form of a filter value: times become ISO strings, collections lists."""
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [_param_value(field, v) for v in items]
    if field in TIME_FIELDS and value is not None:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError as exc:
                raise StoreError(f"filter {field}: not an ISO-8601 time: {value!r}") from exc
        if not isinstance(value, datetime):
            raise StoreError(f"filter {field}: expected a datetime, got {type(value).__name__}")
        return iso(value)
    if value is not None and not isinstance(value, _SCALAR):
        raise StoreError(f"filter {field}: unsupported value type {type(value).__name__}")
    return value


def compile_filters(
    filters: Sequence[Filter], dialect: Dialect, var: str = "n", prefix: str = "p"
) -> tuple[str, dict[str, object]]:
    """``(conditions joined by AND, parameters)``; empty text when there are no filters.

    Semantics (shared with ``sinks.filtering`` for the vector join): on ``tags``/``entities``
    ``contains`` is membership, ``in`` is any overlap, ``=``/``!=`` compare whole lists;
    ``contains`` on text is a substring test; ``!=`` matches a missing value; a range
    never matches a missing value.
    """
    clauses: list[str] = []
    params: dict[str, object] = {}
    for i, flt in enumerate(filters):
        if not isinstance(flt, Filter) or flt.field not in FILTER_FIELDS:
            raise StoreError(f"not a valid filter: {flt!r}")
        name = f"{prefix}{i}"
        prop = f"{var}.{flt.field}"  # field name from the FILTER_FIELDS whitelist only
        value = _param_value(flt.field, flt.value)
        clauses.append(_clause(flt, prop, name, value, dialect))
        if value is not None:
            params[name] = value
    return " AND ".join(clauses), params


def _clause(flt: Filter, prop: str, name: str, value: object, dialect: Dialect) -> str:
    field, op, ref = flt.field, flt.op, f"${name}"
    if field in LIST_FIELDS:
        match op:
            case "contains":
                return f"{ref} IN coalesce({prop}, [])"
            case "in":
                return f"any(x IN coalesce({prop}, []) WHERE x IN {ref})"
            case "=" | "!=" if isinstance(value, list):
                same = f"coalesce({prop}, []) = {ref}"
                return same if op == "=" else f"NOT {same}"
        raise StoreError(f"filter {field} {op}: lists support =, != (with a list), in, contains")
    match op:
        case "=":
            return f"{prop} IS NULL" if value is None else f"{prop} = {ref}"
        case "!=":
            if value is None:
                return f"{prop} IS NOT NULL"
            return f"({prop} IS NULL OR {prop} <> {ref})"
        case "in":
            return f"{prop} IN {ref}"
        case "contains":
            if field in TIME_FIELDS | NUMBER_FIELDS | BOOL_FIELDS or not isinstance(value, str):
                raise StoreError(f"filter {field} contains: needs a text field and a text value")
            return f"{prop} CONTAINS {ref}"
    if op in _RANGE_OPS and value is not None and field not in BOOL_FIELDS:
        left = prop if field in NUMBER_FIELDS else dialect.string_range.format(prop)
        return f"{left} {_RANGE_OPS[op]} {ref}"
    raise StoreError(f"filter {field} {op} {flt.value!r} is not supported")

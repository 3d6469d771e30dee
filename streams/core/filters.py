"""``search_filter``: the metadata conditions a caller may put on a search.

Syntax: ``{"field": value}`` means equality; ``{"field": {"op": value, ...}}`` with
``op`` one of ``= != in contains < <= > >=``. Fields come from a whitelist and values
only ever travel to the stores as parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from memstream.sinks.ports import FILTER_FIELDS, TIME_FIELDS, Filter, FilterField, FilterOp
from memstream.topics.models import parse_iso_time

OPS: frozenset[str] = frozenset({"=", "!=", "in", "contains", "<", "<=", ">", ">="})


class FilterSyntaxError(ValueError):
    """A search_filter the Searcher cannot apply; the message names the problem."""


def parse_search_filter(spec: Mapping[str, Any] | None) -> list[Filter]:
    if not spec:
        return []
    filters: list[Filter] = []
    for name, condition in spec.items():
        if name not in FILTER_FIELDS:
            allowed = ", ".join(sorted(FILTER_FIELDS))
            raise FilterSyntaxError(f"search_filter: unknown field {name!r} (allowed: {allowed})")
        field = cast(FilterField, name)
        if isinstance(condition, Mapping):
            if not condition:
                raise FilterSyntaxError(f"search_filter: empty condition for {name!r}")
            for op, value in condition.items():
                if op not in OPS:
                    raise FilterSyntaxError(
                        f"search_filter: unknown operator {op!r} for {name!r} "
                        f"(allowed: {' '.join(sorted(OPS))})")
                filters.append(_make(field, cast(FilterOp, op), value))
        else:
            filters.append(_make(field, "=", condition))
    return filters


def _make(field: FilterField, op: FilterOp, value: Any) -> Filter:
    if op == "in" and not isinstance(value, list):
        raise FilterSyntaxError(f"search_filter: {field} 'in' needs a list")
    if op != "in" and isinstance(value, list | dict):
        raise FilterSyntaxError(f"search_filter: {field} {op!r} needs a single value")
    if field in TIME_FIELDS and op != "in":
        try:
            _as_time(value)
        except (TypeError, ValueError) as exc:
            raise FilterSyntaxError(
                f"search_filter: {field} needs an ISO-8601 time with a timezone") from exc
    return Filter(field, op, value)


def _as_time(value: Any) -> datetime:
    return parse_iso_time(str(value), naive_as_utc=False)


def names_status(filters: Iterable[Filter]) -> bool:
    """Whether the caller chose the statuses (``{"status": "archived"}``, ``{"status": {"in":
    [...]}}``): then the filter decides; otherwise search returns activated memories only."""
    return any(f.field == "status" for f in filters)

"""Milvus boolean expressions built from typed filters.

The expression text is assembled only from field names and ``{pN}`` placeholders;
every user value travels in a params dict. A Milvus server (>= 2.5) receives the
params as expression templates (``filter_params``). Milvus Lite 3.2 rejects
placeholders (measured: "unexpected character '{'"), so for it ``render`` inlines
each value as a literal escaped for the grammar both parsers share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memstream.sinks.filtering import (
    LIST_FIELDS,
    as_datetime,
    scalar_matches,
    vector_filter_supported,
)
from memstream.sinks.ports import Filter, StoreError, VectorQuery, VectorRecord

_CMP = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_PLACEHOLDER = re.compile(r"\{(p\d+)\}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(value: object) -> int:
    """Epoch microseconds of an aware datetime or ISO-8601 string; ``""`` means unknown (0)."""
    if value == "":
        return 0
    delta = as_datetime(value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class Expression:
    """An expression skeleton plus the values of its placeholders."""

    clauses: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)
    empty: bool = False  # some clause can match nothing (an empty ``in`` list)

    def param(self, value: object) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return "{" + name + "}"

    @property
    def text(self) -> str:
        return " and ".join(f"({c})" for c in self.clauses)


def _string_value(flt: Filter, value: object) -> str:
    if value is None and flt.field == "session_id":
        return ""  # stored as "" when a record has no session
    if not isinstance(value, str):
        raise StoreError(f"filter {flt.field} needs a string, got {type(value).__name__}")
    return value


def _in_values(flt: Filter) -> list[object]:
    assert isinstance(flt.value, list | tuple | set | frozenset)  # noqa: S101  (checked by Filter)
    values = list(flt.value)
    return sorted(values, key=repr) if isinstance(flt.value, set | frozenset) else values


def add_filter(expr: Expression, flt: Filter) -> None:
    """Translate one ``Filter``; raises StoreError for what a vector store cannot evaluate."""
    if not vector_filter_supported(flt):
        raise StoreError(
            f"filter {flt.field} {flt.op} is not supported by the vector store "
            "(only VectorRecord fields; 'contains' only on tags); filter through MemoryStore"
        )
    if flt.field == "tags":
        if flt.op == "contains":
            expr.clauses.append(
                f"array_contains({flt.field}, {expr.param(_string_value(flt, flt.value))})"
            )
            return
        values = [_string_value(flt, v) for v in _in_values(flt)]
        expr.empty |= not values
        expr.clauses.append(f"array_contains_any({flt.field}, {expr.param(values)})")
        return
    if flt.field == "updated_at":
        column = "updated_ts"
        if flt.op == "in":
            micros = [to_micros(v) for v in _in_values(flt)]
            expr.empty |= not micros
            expr.clauses.append(f"{column} in {expr.param(micros)}")
        else:
            expr.clauses.append(f"{column} {_CMP[flt.op]} {expr.param(to_micros(flt.value))}")
        return
    if flt.op == "in":
        strings = [_string_value(flt, v) for v in _in_values(flt)]
        expr.empty |= not strings
        expr.clauses.append(f"{flt.field} in {expr.param(strings)}")
        return
    expr.clauses.append(f"{flt.field} {_CMP[flt.op]} {expr.param(_string_value(flt, flt.value))}")


def query_vector(vector: Sequence[float], dim: int) -> np.ndarray:
    """A search's query as float32, refused unless it has the collection's dimension."""
    query = np.asarray(vector, dtype=np.float32)
    if query.shape != (dim,):
        raise StoreError(f"query vector has shape {query.shape}, expected ({dim},)")
    return query


def search_expression(cube_id: str, query: VectorQuery) -> Expression:
    """What a search asks of Milvus; the stores without Milvus build it too, to refuse a
    query with the same errors."""
    expr = Expression()
    expr.clauses.append(f"cube_id == {expr.param(cube_id)}")
    if query.memory_types is not None:
        types = list(dict.fromkeys(query.memory_types))
        expr.empty |= not types
        expr.clauses.append(f"memory_type in {expr.param(types)}")
    if query.status is not None:
        expr.clauses.append(f"status == {expr.param(query.status)}")
    for flt in query.filters:
        add_filter(expr, flt)
    return expr


def cube_expression(cube_id: str) -> Expression:
    expr = Expression()
    expr.clauses.append(f"cube_id == {expr.param(cube_id)}")
    return expr


def escape_string(value: str) -> str:
    """A double-quoted literal both the Milvus server and Milvus Lite parsers read back verbatim."""
    if "\x00" in value:
        raise StoreError("filter values must not contain NUL characters")
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(f"filter value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return escape_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise StoreError(f"unsupported filter value type {type(value).__name__}")


def render(text: str, params: dict[str, object]) -> str:
    """Inline every placeholder as an escaped literal (the skeleton holds no user text)."""
    return _PLACEHOLDER.sub(lambda m: literal(params[m.group(1)]), text)


def record_answers(record: VectorRecord, query: VectorQuery) -> bool:
    """A record of the query's types and status that passes all its filters: what the
    expression of ``search_expression`` selects (for the stores that search without Milvus)."""
    return ((query.memory_types is None or record.memory_type in query.memory_types)
            and (query.status is None or record.status == query.status)
            and all(record_matches(record, f) for f in query.filters))


def record_matches(record: VectorRecord, flt: Filter) -> bool:
    """One pushed-down filter on a record, evaluated as the Milvus expression would be (the
    cache and the in-memory store answer exactly what Milvus would)."""
    actual: Any = getattr(record, flt.field)
    value: Any = flt.value
    if flt.field in LIST_FIELDS:
        if flt.op == "contains":
            return value in actual
        return any(v in actual for v in value)  # "in": any overlap
    if flt.field == "updated_at":  # compared as microseconds; a missing time counts as 0
        actual = to_micros(actual) if actual else 0
        value = [to_micros(v) for v in value] if flt.op == "in" else to_micros(value)
    elif flt.field == "session_id":  # stored and compared as "" when there is no session
        actual = actual or ""
        value = ["" if v is None else v for v in value] if flt.op == "in" else value or ""
    return scalar_matches(flt.op, actual, value)

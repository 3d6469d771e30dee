"""How a LangGraph store item lives in a memstream node, and how store filters match it.

An item's JSON value travels in the node's ``background`` inside a small envelope that also
names its namespace and key, so a node is known as a store item (summaries the optimizer
writes in the same cube are not) and read back exactly as it was put. The node's text, the
part memstream embeds and searches, is drawn from the value: its indexed fields, or for a
value with no index given, its string fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import get_text_at_path

FORMAT = "langgraph-store/1"


@dataclass(frozen=True)
class Envelope:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]


def encode(namespace: tuple[str, ...], key: str, value: Mapping[str, Any]) -> str:
    """The ``background`` of a store item (refuses a value that is not JSON)."""
    try:
        return json.dumps({"format": FORMAT, "namespace": list(namespace), "key": key,
                           "value": dict(value)}, ensure_ascii=False, sort_keys=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the value of {key!r} in {namespace} is not JSON: {exc}") from None


def decode(background: str) -> Envelope | None:
    """The item a node holds, or None for a node the store did not write."""
    if not background.startswith("{"):
        return None
    try:
        data = json.loads(background)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return Envelope(tuple(data["namespace"]), str(data["key"]), dict(data["value"]))


def text_of(key: str, value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """What memstream embeds and searches for an item. ``fields``: LangGraph index paths
    (``"memory"``, ``"facts[*].text"``, ``"$"`` for the whole value as JSON); None: the
    value's string fields, one per line (``field: text`` when there are several)."""
    if fields is not None:
        parts = [t for f in fields for t in get_text_at_path(dict(value), f) if t.strip()]
    else:
        strings = [(k, v) for k, v in value.items() if isinstance(v, str) and v.strip()]
        parts = [strings[0][1]] if len(strings) == 1 else [f"{k}: {v}" for k, v in strings]
        if not parts and value:
            parts = [json.dumps(dict(value), ensure_ascii=False, sort_keys=True)]
    return "\n".join(parts).strip() or key


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter semantics: each field equal (objects compared field by field,
    lists element by element) or satisfying ``$eq $ne $gt $gte $lt $lte``."""
    return not conditions or all(_compare(value.get(k), v) for k, v in conditions.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(
            _compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return isinstance(actual, list | tuple) and len(actual) == len(wanted) and all(
            _compare(a, w) for a, w in zip(actual, wanted, strict=True))
    return bool(actual == wanted)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    match op:
        case "$eq":
            return bool(actual == operand)
        case "$ne":
            return bool(actual != operand)
        case "$gt" | "$gte" | "$lt" | "$lte":
            if not isinstance(actual, int | float) or isinstance(actual, bool):
                return False  # a missing or non-numeric field matches no comparison
            number = float(operand)
            return {"$gt": actual > number, "$gte": actual >= number,
                    "$lt": actual < number, "$lte": actual <= number}[op]
        case _:
            raise ValueError(f"unsupported filter operator {op!r}; use $eq, $ne, $gt, $gte, "
                             "$lt or $lte")

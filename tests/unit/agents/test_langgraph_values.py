"""How a LangGraph store item is kept in a memstream node and matched by store filters."""

from __future__ import annotations

import pytest

from memstream.agents.langgraph_values import decode, encode, matches, text_of


def test_an_item_round_trips_through_the_background_and_others_are_not_items() -> None:
    value = {"text": "Alice likes tea.", "n": 2, "nested": {"ok": True}, "list": [1, "二"]}
    env = decode(encode(("users", "alice"), "k1", value))
    assert env is not None
    assert (env.namespace, env.key, env.value) == (("users", "alice"), "k1", value)
    assert decode("Concept over 3 memories sharing the tags food") is None  # a summary's
    assert decode('{"summary": "not ours"}') is None
    assert decode("{not json") is None
    with pytest.raises(ValueError, match="not JSON"):
        encode(("a",), "k", {"when": object()})
    with pytest.raises(ValueError, match="not JSON"):
        encode(("a",), "k", {"x": float("nan")})


def test_the_text_memstream_embeds() -> None:
    assert text_of("k", {"text": "Alice likes tea.", "n": 3}, None) == "Alice likes tea."
    assert text_of("k", {"food": "tea", "city": "Lyon"}, None) == "food: tea\ncity: Lyon"
    assert text_of("k", {"n": 3}, None) == '{"n": 3}'
    assert text_of("k", {}, None) == "k"
    facts = {"facts": [{"t": "one"}, {"t": "two"}], "title": "x"}
    assert text_of("k", facts, ["facts[*].t"]) == "one\ntwo"
    assert text_of("k", facts, ["title", "missing"]) == "x"
    assert text_of("k", {"a": 1}, ["$"]) == '{"a": 1}'


def test_filters_follow_langgraph_semantics() -> None:
    value = {"kind": "health", "level": 3, "meta": {"source": "chat", "n": 1},
             "tags": ["a", "b"], "flag": True}
    assert matches(value, None) and matches(value, {})
    assert matches(value, {"kind": "health", "level": 3})
    assert not matches(value, {"kind": "work"})
    assert matches(value, {"meta": {"source": "chat"}})  # objects: field by field
    assert not matches(value, {"meta": {"source": "form"}})
    assert matches(value, {"tags": ["a", "b"]}) and not matches(value, {"tags": ["a"]})
    assert matches(value, {"level": {"$gt": 2, "$lte": 3}})
    assert not matches(value, {"level": {"$lt": 3}})
    assert matches(value, {"kind": {"$ne": "work"}, "missing": {"$ne": 1}})
    assert matches(value, {"level": {"$eq": 3}})
    assert not matches(value, {"missing": {"$gt": 0}})  # a missing field matches no comparison
    assert not matches(value, {"flag": {"$gte": 0}})  # nor does a boolean
    with pytest.raises(ValueError, match=r"unsupported filter operator '\$in'"):
        matches(value, {"kind": {"$in": ["health"]}})

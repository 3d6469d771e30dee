"""Deterministic ids (topics/ids.py): a redelivery names the same memory and chunk."""

from __future__ import annotations

from memstream.topics.ids import chunk_source_key, memory_id, working_copy_id


def test_ids_are_deterministic_and_distinct() -> None:
    a = memory_id("cube", "msgs:m1,m2", 0)
    assert a == memory_id("cube", "msgs:m1,m2", 0)
    assert len({a, memory_id("cube", "msgs:m1,m2", 1), memory_id("other", "msgs:m1,m2", 0),
                memory_id("cube", "msgs:m1", 0)}) == 4
    assert working_copy_id(a) != a and working_copy_id(a) == working_copy_id(a)


def test_chunk_keys_follow_what_was_said_not_only_the_message_ids() -> None:
    said = [("m0", "user", "I no longer eat meat.")]
    assert chunk_source_key("s1", said) == chunk_source_key("s1", list(said))  # redelivery
    # a per-session counter reused for something else said is another chunk
    assert chunk_source_key("s1", said) != chunk_source_key("s1", [("m0", "user", "I run.")])
    assert chunk_source_key("s1", said) != chunk_source_key("s2", said)

"""Titles (keys) made when nobody supplied one: whole words, never a word cut in half."""

from __future__ import annotations

import jieba

from memstream.streams.memory.logic import build_node
from memstream.streams.prompts.fusion import fallback_key
from memstream.streams.text.words import short_title
from memstream.topics.events import ExtractedMemory


def test_a_long_chinese_statement_gets_a_title_of_whole_words() -> None:
    text = "我们全家下个月要去云南大理古城旅游顺便拜访住在那里的外婆"
    title = short_title(text)
    assert title and text.find(title) >= 0
    words = list(jieba.cut(text))
    # the title ends where a segmented word ends: a prefix of the word sequence
    ends = {len("".join(words[:n])) for n in range(len(words) + 1)}
    assert text.find(title) + len(title) in ends


def test_fallback_key_and_the_add_stage_default_key_agree() -> None:
    for text in ("养了一只叫小白的猫，它三岁了。", "I no longer eat meat because of my health."):
        node = build_node(ExtractedMemory(user_id="u", cube_id="u", memory=text))
        assert node.metadata.key == fallback_key(text) == short_title(text)
    assert short_title("I no longer eat meat because of my health.") == "no longer eat meat"


def test_japanese_and_korean_titles_keep_their_script() -> None:
    assert short_title("私は毎朝コーヒーを飲みます。") == "私は毎朝コーヒーを飲みます"
    assert short_title("저는 서울에 살아요.") == "저는 서울에 살아요"


def test_english_titles_end_on_a_whole_phrase_not_a_fragment() -> None:
    """Issue #27.9: the demo's keys were fragments ("prefer working in the early")."""
    assert short_title("I prefer working in the early morning when the office is quiet.") \
        == "prefer working in the early morning"
    assert short_title("I love seafood but I'm allergic to shellfish.") == "love seafood"
    assert short_title("We booked a flight for May 14 and a small hotel in Alfama.") \
        == "booked a flight for May 14"
    assert short_title("The user likes coffee. The user likes jazz music.") \
        == "The user likes coffee"


def test_tags_leave_out_dates_and_words_that_name_no_topic() -> None:
    """Issue #27.9: the demo's tags included "small", "may" and "light"."""
    from memstream.streams.text.words import tags_for

    tags = tags_for("We booked a flight for May 14 and a small hotel in Alfama.")
    assert not {"may", "small"} & set(tags) and {"flight", "hotel"} <= set(tags)
    assert "light" not in tags_for("I usually travel light.")
    assert "friday" not in tags_for("I have to finish the quarterly report by Friday.")

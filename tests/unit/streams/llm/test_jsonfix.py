"""JSON recovery from the shapes real models answer in."""

from __future__ import annotations

import pytest

from memstream.streams.llm.jsonfix import JSONRecoveryError, recover_json

EXPECTED = {"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}


@pytest.mark.parametrize(
    "answer",
    [
        '{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}',
        '  \n{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}\n\n',
        '```json\n{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}\n```',
        '```\n{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}\n```',
        'Sure! Here is the result:\n```JSON\n{"memories": [{"key": "tea", "tags": '
        '["drink", "tea"]}], "summary": "ok"}\n```\nLet me know if you need more.',
        'Here you go: {"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"} '
        "Hope this helps.",
        '{"memories": [{"key": "tea", "tags": ["drink", "tea",],},], "summary": "ok",}',
        '{\n  // the extracted memories\n  "memories": [{"key": "tea", "tags": ["drink", "tea"]}],'
        '\n  "summary": "ok" // one line\n}',
        '{"memories": [{"key": "tea", /* inline */ "tags": ["drink", "tea"]}], "summary": "ok"}',
        "<think>The user mentions {tea}. I should answer in JSON.</think>\n"
        '{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}',
        'I considered {this} first, then: {"memories": [{"key": "tea", "tags": ["drink", "tea"]}],'
        ' "summary": "ok"}',
        '\ufeff{"memories": [{"key": "tea", "tags": ["drink", "tea"]}], "summary": "ok"}',
    ],
    ids=[
        "plain",
        "whitespace",
        "json-fence",
        "bare-fence",
        "chatty-fence",
        "chatty-inline",
        "trailing-commas",
        "line-comments",
        "block-comment",
        "think-block",
        "braces-in-prose-before",
        "bom",
    ],
)
def test_recovers_object(answer: str) -> None:
    assert recover_json(answer) == EXPECTED


def test_brackets_and_comment_markers_inside_strings_are_kept() -> None:
    answer = 'Result: {"value": "a {weird} [text] // not a comment, }", "n": 1} trailing'
    assert recover_json(answer) == {"value": "a {weird} [text] // not a comment, }", "n": 1}


def test_escaped_quotes_inside_strings() -> None:
    answer = 'ok {"value": "she said \\"hi}\\" twice", "list": [1, 2,]}'
    assert recover_json(answer) == {"value": 'she said "hi}" twice', "list": [1, 2]}


def test_top_level_array_in_prose() -> None:
    assert recover_json("The ids are [3, 1, 2] in order.") == [3, 1, 2]


def test_first_value_wins_when_several() -> None:
    assert recover_json('{"a": 1}\n{"a": 2}') == {"a": 1}


def test_chinese_content_survives() -> None:
    answer = '```json\n{"summary": "用户喜欢喝茶，尤其是绿茶。"}\n```'
    assert recover_json(answer) == {"summary": "用户喜欢喝茶，尤其是绿茶。"}


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   ",
        "I cannot help with that.",
        '{"memories": [{"key": "tea"',  # truncated
        "{not json at all}",
        "```json\n```",
    ],
    ids=["empty", "blank", "prose", "truncated", "braces-not-json", "empty-fence"],
)
def test_unrecoverable_answers_raise_clear_error(answer: str) -> None:
    with pytest.raises(JSONRecoveryError) as info:
        recover_json(answer)
    assert "empty" in str(info.value) or "no JSON" in str(info.value)


def test_error_message_shows_the_answer_start() -> None:
    with pytest.raises(JSONRecoveryError, match="I cannot comply"):
        recover_json("I cannot comply with this request, sorry.")

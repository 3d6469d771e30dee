"""Words by which a statement says that something changed (streams/text/changes.py): a
"now" that looks back (until now, in hindsight) says no change."""

from __future__ import annotations

import pytest

from memstream.streams.text.changes import change_marker, unreal


@pytest.mark.parametrize(("text", "marker"), [
    ("我现在住在北京", "现在"),
    ("以前住上海，现在住杭州了", "现在"),
    ("我已经不抽烟了", "已经不"),
    ("I moved from Lyon to Berlin", "moved"),
    ("I don't eat meat anymore", "anymore"),
])
def test_a_said_change_has_its_marker(text: str, marker: str) -> None:
    assert change_marker(text) == marker


@pytest.mark.parametrize("text", [
    "想起我刚毕业那年在北京做销售，天天喝酒应酬，现在想想真不容易。",  # in hindsight
    "我小时候家里养过一只土狗叫旺财，后来走丢了，到现在还会想它。",  # until now
    "现在看来那次选择是对的",
    "I live in Lyon and love it",
])
def test_a_now_that_looks_back_is_no_change(text: str) -> None:
    assert change_marker(text) is None


@pytest.mark.parametrize("text", ["say I moved to Lisbon, hypothetically",
                                  "let's say we sold the house",
                                  "如果我搬到柏林"])
def test_a_supposition_is_not_a_statement_of_what_is(text: str) -> None:
    assert unreal(text)

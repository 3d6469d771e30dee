"""The features the rules judge compares (streams/llm/rules/conflict_analysis.py): values,
stems, numbers and subjects."""

from __future__ import annotations

from memstream.streams.llm.rules.conflict_analysis import analyse, stem, zh_number


def test_date_formats_are_compared_by_value() -> None:
    assert analyse("born on March 14, 2019").values == analyse("born on 2019-03-14").values
    assert analyse("at 3 pm").values == analyse("at 15:00").values
    assert ("date", "2024-06-12") in analyse("用户的预约在2024年6月12日。").values


def test_stemming_and_chinese_numbers() -> None:
    assert stem("lives") == stem("living") == stem("lived") == stem("live")
    assert stem("movies") == stem("movie")
    numbers = ("三", "十五", "二十", "两千五百", "5500")
    assert [zh_number(x) for x in numbers] == [3, 15, 20, 2500, 5500]


def test_subjects() -> None:
    assert analyse("The user's sister Mei is a nurse.").subject == {"rel:sister", "name:mei"}
    assert analyse("In April 2025 the user intends to travel.").subject == {"user"}
    assert analyse("用户的女儿喜欢画画。").subject == {"rel:daughter"}

"""The calendar dates a question names, and the days they hold (search's time-aware ranking)."""

from datetime import date

import pytest

from memstream.streams.text.named_dates import NamedDate, named_dates


@pytest.mark.parametrize(("question", "expected"), [
    ("What painting did Melanie show on October 13, 2023?", NamedDate(10, 2023, 13)),
    ("What did Gina find for her store on 1 February, 2023?", NamedDate(2, 2023, 1)),
    ("What did she do on the 3rd of June?", NamedDate(6, None, 3)),
    ("Which class did Maria start in December 2023?", NamedDate(12, 2023)),
    ("What did he do last weekend before April 10, 2023?", NamedDate(4, 2023, 10, -1)),
    ("Where did we go after Sept. 2, 2024?", NamedDate(9, 2024, 2, 1)),
    ("what happened on 2023-05-03", NamedDate(5, 2023, 3)),
    ("我2023年5月3日做了什么？", NamedDate(5, 2023, 3)),
    ("5月之前我在哪里工作？", NamedDate(5, None, None, -1)),
])
def test_a_named_date_is_read_with_its_precision_and_side(question: str,
                                                          expected: NamedDate) -> None:
    assert named_dates(question) == [expected]


@pytest.mark.parametrize("question", [
    "What may I eat?",  # a verb, not the month
    "Will we march on Sunday?",
    "How many kids does Melanie have?",
    "What did I do yesterday?",  # relative: no day to resolve against
    "I have 40 dollars",
])
def test_a_question_naming_no_date_names_none(question: str) -> None:
    assert named_dates(question) == []


def test_a_day_holds_itself_and_the_day_either_side() -> None:
    day = NamedDate(10, 2023, 13)
    assert [day.holds(date(2023, 10, d)) for d in (11, 12, 13, 14, 15)] == \
        [False, True, True, True, False]
    assert not day.holds(date(2022, 10, 13))
    assert NamedDate(10, None, 13).holds(date(2022, 10, 13))  # no year: every year's


def test_a_month_holds_its_days_and_before_after_hold_thirty_days_on_their_side() -> None:
    month = NamedDate(12, 2023)
    assert month.holds(date(2023, 12, 1)) and month.holds(date(2023, 12, 31))
    assert not month.holds(date(2024, 1, 1)) and not month.holds(date(2023, 11, 30))
    before = NamedDate(4, 2023, 10, -1)
    assert before.holds(date(2023, 4, 10)) and before.holds(date(2023, 3, 12))
    assert not before.holds(date(2023, 4, 11)) and not before.holds(date(2023, 3, 10))
    after = NamedDate(4, 2023, 10, 1)
    assert after.holds(date(2023, 5, 10)) and not after.holds(date(2023, 4, 9))
    assert not NamedDate(2, 2023, 30).holds(date(2023, 3, 1))  # no such day

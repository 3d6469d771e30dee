"""Deadlines and days without a year are resolved like "next Friday" (issue #27.9)."""

from __future__ import annotations

from datetime import date

import pytest

from memstream.streams.llm.rules.extraction import _annotate
from memstream.streams.llm.rules.reldates import find_en

WEDNESDAY = date(2026, 4, 22)


def resolved(text: str, today: date = WEDNESDAY) -> str:
    return _annotate(text, find_en(text, today), zh=False)


@pytest.mark.parametrize(("said", "stored"), [
    ("Finish the quarterly report by Friday.",
     "Finish the quarterly report by Friday [2026-04-24]."),
    ("Send it by Wednesday.", "Send it by Wednesday [2026-04-22]."),  # today is one
    ("We booked a flight for May 14.", "We booked a flight for May 14 [2026-05-14]."),
    ("The meeting is on the 3rd of June.", "The meeting is on the 3rd of June [2026-06-03]."),
    ("next Friday I fly.", "next Friday [2026-05-01] I fly."),
])
def test_deadlines_and_month_days_are_resolved(said: str, stored: str) -> None:
    assert resolved(said) == stored


def test_the_nearest_year_is_taken_and_written_years_are_left_alone() -> None:
    assert resolved("We met on December 30.", date(2027, 1, 2)) == \
        "We met on December 30 [2026-12-30]."
    assert resolved("I was born on May 14, 1990.") == "I was born on May 14, 1990."
    assert resolved("I may 2 go.") == "I may 2 go."  # a verb, not the month
    assert resolved("It was on February 30.") == "It was on February 30."

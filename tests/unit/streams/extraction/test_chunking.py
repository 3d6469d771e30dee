from __future__ import annotations

import pytest

from memstream.streams.extraction.chunking import chunk_text

TEXT = ("The museum opens at nine. Tickets cost twelve euros! Guided tours run hourly.\n\n" * 30
        + "博物馆九点开门。门票十二欧元！每小时有导游。" * 20)


def test_chunks_cover_the_text_with_exact_offsets() -> None:
    chunks = chunk_text(TEXT, 400, 80)
    assert len(chunks) > 5
    assert all(TEXT[c.start:c.end] == c.text for c in chunks)
    assert all(len(c.text) <= 400 for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(TEXT.rstrip())
    # consecutive chunks overlap or touch: nothing is lost between them
    assert all(b.start <= a.end for a, b in zip(chunks, chunks[1:], strict=False))
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_chunks_end_on_sentence_breaks_when_possible() -> None:
    for c in chunk_text(TEXT, 400, 80)[:-1]:
        assert c.text[-1] in ".!?。！？"


def test_short_text_is_one_chunk_and_bad_sizes_are_rejected() -> None:
    assert [c.text for c in chunk_text("Just one line.", 400, 80)] == ["Just one line."]
    with pytest.raises(ValueError, match="exceed"):
        chunk_text("x", 50, 50)

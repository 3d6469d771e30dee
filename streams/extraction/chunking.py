"""Split a document into overlapping chunks on paragraph and sentence boundaries."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BREAKS = re.compile(r"\n\s*\n|(?<=[.!?。！？；;])\s*")


@dataclass(frozen=True, slots=True)
class TextChunk:
    index: int
    start: int  # character offsets into the document
    end: int
    text: str


def chunk_text(text: str, size: int, overlap: int) -> list[TextChunk]:
    """Chunks of at most ``size`` characters, cut at the last sentence or paragraph break.

    Each chunk after the first starts ``overlap`` characters before the previous end
    (snapped forward to a break when one is near) so a sentence cut at a boundary is
    seen whole by one chunk.
    """
    if size <= overlap:
        raise ValueError("chunk size must exceed the overlap")
    chunks: list[TextChunk] = []
    start, n = 0, len(text)
    while start < n:
        hard_end = min(start + size, n)
        end = hard_end
        if hard_end < n:
            cuts = [m.end() for m in _BREAKS.finditer(text, start, hard_end) if m.end() > start]
            good = [c for c in cuts if c - start >= size // 2]
            if good:
                end = good[-1]
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            trail = len(piece.rstrip())
            chunks.append(TextChunk(len(chunks), start + lead, start + trail,
                                    piece.strip()))
        if end >= n:
            break
        next_start = max(end - overlap, start + 1)
        snaps = [m.end() for m in _BREAKS.finditer(text, next_start, end)]
        start = snaps[0] if snaps and snaps[0] < end else next_start
    return chunks

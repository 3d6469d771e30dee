"""Turn ranking across languages: a fact said in one language, asked about in another.

Two things kept a cube holding Chinese and English from answering across them. The
multilingual embedder scores texts in the question's own language higher, whatever they say:
with multilingual-e5-small a Chinese question's cosine with unrelated Chinese statements is
about 0.10 above its cosine with unrelated English ones (an English question's, about 0.01),
so every Chinese statement outranked the English one that answered. And keyword ranking
cannot meet a text in another script at all, so a same-language text sharing one word with
the question ("喜欢") took a first place of a ranking the answer could never enter.

So, per question: the cosines of turns (and episodes, by their share of such turns) in
another script are raised by the gap between the two scripts' median cosines (``shift``,
``level``), and a keyword ranking takes in the candidates it cannot see by that levelled
cosine, each after the found ones closer to the question (``unseen_ranked``). On the
cross-lingual facts (``bench/crosslingual.py``) hit@1 went from 0.339 to 0.814.

Both apply only when a cube's turns are in more than one script and some are in the
question's: a cube in one language, or a question in a script none of its turns use, ranks
exactly as before. They add no setting: the shift is read from each question's own cosines.
"""

from __future__ import annotations

import re
from bisect import bisect_right

import numpy as np

from memstream.streams.text.words import Script, script_of

SCRIPT_CODES: dict[Script, int] = {"latin": 0, "zh": 1, "ja": 2, "ko": 3}
# Fewer candidates than this in either script: their median says too little to shift by.
MIN_GROUP = 3
# "[time] Name: " before a turn's words: Latin letters of every turn, whatever its language.
_TURN_HEAD = re.compile(r"^(?:\[[^\]\n]*\]\s*)?(?:[^:\n\[\]]{1,40}?\s*:\s*)?")


def script_code(text: str) -> int:
    """The script of a turn's (or a question's) words, its time and speaker left out."""
    return SCRIPT_CODES[script_of(_TURN_HEAD.sub("", text, count=1))]


def other_script(query: str, scripts: np.ndarray) -> np.ndarray | None:
    """Per turn, whether its words are in another script than ``query``'s; None when the
    turns are all in one script or none is in the query's (nothing to correct)."""
    other = scripts != script_code(query)
    return other if other.any() and not other.all() else None


def shift(cosines: dict[int, float], other: np.ndarray) -> float:
    """How much higher the question's cosine is with the candidates in its own script than
    with those in the other scripts, median against median (most candidates do not answer,
    so the medians measure the language, not the content); 0 when either group is too small
    or the other scripts score no lower."""
    same = [c for i, c in cosines.items() if not other[i]]
    rest = [c for i, c in cosines.items() if other[i]]
    if min(len(same), len(rest)) < MIN_GROUP:
        return 0.0
    return max(0.0, float(np.median(same) - np.median(rest)))


def level(cosines: dict[int, float], share: np.ndarray, by: float) -> dict[int, float]:
    """``cosines`` with ``by`` added in proportion to each candidate's ``share`` of words in
    another script than the question's (1 for a turn in another script; an episode's share
    of such turns)."""
    if by <= 0:
        return cosines
    return {i: c + by * float(share[i]) for i, c in cosines.items()}


def episode_shares(other: np.ndarray, episode_of_turn: np.ndarray, episodes: int) -> np.ndarray:
    """Per episode, the share of its turns in another script than the question's."""
    turns = np.bincount(episode_of_turn, minlength=episodes)
    others = np.bincount(episode_of_turn, weights=other.astype(np.float64), minlength=episodes)
    return np.divide(others, turns, out=np.zeros(episodes), where=turns > 0)


def unseen_ranked(ranks: dict[int, int], cosines: dict[int, float],
                  blind: np.ndarray) -> dict[int, int]:
    """A keyword ranking (1-based ranks of what it found) with the candidates it cannot see
    (``blind``: in another script than the question, wholly or in part) placed in it by
    (levelled) cosine: one that stands at least as close to the question as some found
    candidate ranks right after the found ones that stand closer. So it is never put above a
    found candidate that is closer to the question, and never below one that is further from
    it only for lacking the question's words. A ranking that found nothing stays empty."""
    found = sorted(cosines[i] for i in ranks if i in cosines)
    if not found:
        return ranks
    out = dict(ranks)
    for i, cosine in cosines.items():
        if blind[i] and i not in ranks and cosine >= found[0]:
            out[i] = 1 + len(found) - bisect_right(found, cosine)
    return out

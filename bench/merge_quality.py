"""Quality of the deterministic relation judge on labelled memory pairs.

    python bench/merge_quality.py [--data tests/data/merge_pairs.jsonl]
                                  [--near-miss tests/data/near_miss_pairs.jsonl] [--errors]

Embeds both statements of every pair with the local e5 embedder (passages, as the
add stage stores them) to get the cosine similarity the stage would see, runs the
``rules`` relation judge, and prints a confusion matrix, precision / recall / F1 per
class and accuracy, per language and in total. A second table applies the stage's
candidate threshold (pairs below it never reach the judge and stay independent), and
a baseline row shows what similarity alone would do (>= merge threshold → redundant).
Then the two figures rules mode must show, as the add stage acts on the verdicts
(only a ``redundant`` pair is merged; a ``contradictory`` one becomes a ``CONFLICT`` edge,
both kept): the duplicate-merge recall (labelled duplicates merged) and the false-merge rate
on the near-miss set — look-alike pairs that must stay apart (different subjects, a plan or
a trip next to a home, two languages, the same thing at two times), where a merge would
archive a true fact (goal 0). Each near-miss class is shown, with the ``CONFLICT`` edges
the judge would add and what a stage that archived every non-independent verdict (main
before) would have lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.streams.embed.local import LocalEmbedder  # noqa: E402
from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.conflict import (  # noqa: E402
    RELATION_JUDGE,
    JudgeContext,
    MemoryStatement,
    Relation,
)
from memstream.streams.text.subjects import different_subjects  # noqa: E402
from memstream.topics.settings import MemorySettings  # noqa: E402

LABELS: tuple[Relation, ...] = ("contradictory", "redundant", "independent")
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "merge_pairs.jsonl"
NEAR_MISS = DEFAULT_DATA.with_name("near_miss_pairs.jsonl")
OLDER = datetime(2024, 1, 10, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Pair:
    old: str
    new: str
    label: Relation
    lang: str
    similarity: float = 0.0
    kind: str = ""


@dataclass(frozen=True)
class Scored:
    pair: Pair
    predicted: Relation
    reason: str


def load_pairs(path: Path) -> list[Pair]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Pair(r["old"], r["new"], r["label"], r["lang"], kind=r.get("kind", "")) for r in rows]


async def with_similarity(pairs: list[Pair]) -> list[Pair]:
    """The cosine of the two passage embeddings (vectors are L2-normalised)."""
    embedder = LocalEmbedder()
    old = await embedder.embed_passages([p.old for p in pairs])
    new = await embedder.embed_passages([p.new for p in pairs])
    sims = (old * new).sum(axis=1)
    return [Pair(p.old, p.new, p.label, p.lang, float(s), p.kind)
            for p, s in zip(pairs, sims, strict=True)]


def judge_pair(pair: Pair, merge_threshold: float) -> Scored:
    ctx = JudgeContext(
        existing=MemoryStatement(text=pair.old, updated_at=OLDER),
        new=MemoryStatement(text=pair.new, updated_at=OLDER + timedelta(days=30)),
        similarity=max(-1.0, min(1.0, pair.similarity)),
        merge_threshold=merge_threshold,
    )
    answer = stand_in(RELATION_JUDGE)(ctx)
    return Scored(pair, answer.relation, answer.reason)


# --------------------------------------------------------------------------- metrics


def confusion(rows: Sequence[tuple[Relation, Relation]]) -> dict[tuple[str, str], int]:
    """Counts by (gold, predicted)."""
    counts: dict[tuple[str, str], int] = {(g, p): 0 for g in LABELS for p in LABELS}
    for gold, predicted in rows:
        counts[(gold, predicted)] += 1
    return counts


def per_class(counts: dict[tuple[str, str], int], label: str) -> tuple[float, float, float, int]:
    tp = counts[(label, label)]
    predicted = sum(counts[(g, label)] for g in LABELS)
    support = sum(counts[(label, p)] for p in LABELS)
    precision = tp / predicted if predicted else 0.0
    recall = tp / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1, support


def accuracy(rows: Sequence[tuple[Relation, Relation]]) -> float:
    return sum(g == p for g, p in rows) / len(rows) if rows else 0.0


def print_table(title: str, rows: Sequence[tuple[Relation, Relation]]) -> None:
    counts = confusion(rows)
    short = {"contradictory": "contra", "redundant": "redund", "independent": "indep"}
    print(f"\n{title}  (n={len(rows)}, accuracy {accuracy(rows):.1%})")
    corner = "gold / predicted"
    print(f"  {corner:<18}" + "".join(f"{short[p]:>8}" for p in LABELS)
          + f"{'prec':>8}{'recall':>8}{'F1':>7}{'n':>5}")
    for gold in LABELS:
        precision, recall, f1, support = per_class(counts, gold)
        cells = "".join(f"{counts[(gold, p)]:>8}" for p in LABELS)
        print(f"  {gold:<18}{cells}{precision:>8.2f}{recall:>8.2f}{f1:>7.2f}{support:>5}")
    macro = sum(per_class(counts, g)[2] for g in LABELS) / len(LABELS)
    print(f"  macro F1 {macro:.2f}")


def merged_by_stage(s: Scored, candidate: float) -> bool:
    """Rules mode: only a ``redundant`` verdict on a pair that reaches the judge is merged
    (the chunk review also skips a pair the subject guard tells apart)."""
    return (s.pair.similarity >= candidate and s.predicted == "redundant"
            and different_subjects(s.pair.old, s.pair.new) is None)


def conflicted_by_stage(s: Scored, candidate: float) -> bool:
    """Rules mode: a ``contradictory`` verdict becomes a ``CONFLICT`` edge, both kept."""
    return (s.pair.similarity >= candidate and s.predicted == "contradictory"
            and different_subjects(s.pair.old, s.pair.new) is None)


def duplicate_recall(scored: Sequence[Scored], candidate: float) -> None:
    """Labelled duplicates the stage merges (one memory left), per language and in total."""
    print("\n=== duplicate-merge recall (labelled redundant pairs merged by the stage) ===")
    for lang in [*sorted({s.pair.lang for s in scored}), "total"]:
        dupes = [s for s in scored if s.pair.label == "redundant"
                 and lang in ("total", s.pair.lang)]
        merged = [s for s in dupes if merged_by_stage(s, candidate)]
        print(f"  [{lang:>5}] duplicate-merge recall {_rate(merged, dupes)}")
    contra = [s for s in scored if s.pair.label == "contradictory"]
    flagged = [s for s in contra if conflicted_by_stage(s, candidate)]
    print(f"  labelled contradictions flagged as CONFLICT (both kept): {_rate(flagged, contra)}")


def false_merges(scored: Sequence[Scored], candidate: float) -> None:
    """Near-miss pairs must stay apart: a merge would archive a true fact."""
    print(f"\n=== false merges on {len(scored)} near-miss pairs (all independent) ===")
    groups = [*(f"lang:{x}" for x in sorted({s.pair.lang for s in scored})),
              *(f"kind:{x}" for x in sorted({s.pair.kind for s in scored})), "total"]
    for group in groups:
        field, _, value = group.partition(":")
        chosen = [s for s in scored if group == "total"
                  or (s.pair.lang if field == "lang" else s.pair.kind) == value]
        merged = [s for s in chosen if merged_by_stage(s, candidate)]
        conflicts = [s for s in chosen if conflicted_by_stage(s, candidate)]
        archived_before = [s for s in chosen if s.pair.similarity >= candidate
                           and s.predicted != "independent"
                           and different_subjects(s.pair.old, s.pair.new) is None]
        print(f"  [{group:>24}] n={len(chosen):>3}  false-merge rate {_rate(merged, chosen)}; "
              f"CONFLICT edges {_rate(conflicts, chosen)}; archived if every "
              f"non-independent verdict merged {_rate(archived_before, chosen)}")
    for s in scored:
        if s.predicted != "independent":
            print(f"  not independent {s.pair.similarity:.3f} {s.predicted}: {s.pair.old} | "
                  f"{s.pair.new}  ({s.reason})")


def _rate(bad: Sequence[Scored], of: Sequence[Scored]) -> str:
    return f"{len(bad) / max(1, len(of)):.1%} ({len(bad)}/{len(of)})"


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--near-miss", type=Path, default=NEAR_MISS,
                        help="look-alike pairs about different subjects, all independent")
    parser.add_argument("--errors", action="store_true", help="list the misjudged pairs")
    args = parser.parse_args()
    defaults = MemorySettings()
    candidate, merge = defaults.conflict_threshold, defaults.merge_threshold

    pairs = load_pairs(args.data)
    started = time.perf_counter()
    pairs = asyncio.run(with_similarity(pairs))
    embed_s = time.perf_counter() - started
    started = time.perf_counter()
    scored = [judge_pair(p, merge) for p in pairs]
    judge_ms = (time.perf_counter() - started) * 1000 / len(pairs)
    print(f"{len(pairs)} pairs from {args.data}; embedded in {embed_s:.1f}s (local e5), "
          f"rules judge {judge_ms:.2f} ms/pair; candidate threshold {candidate:.2f}, "
          f"merge threshold {merge:.2f}")

    langs = sorted({p.lang for p in pairs})
    print("\n=== rules judge on every pair (judge in isolation) ===")
    for lang in [*langs, "total"]:
        chosen = [s for s in scored if lang in ("total", s.pair.lang)]
        print_table(f"[{lang}]", [(s.pair.label, s.predicted) for s in chosen])

    below = [s for s in scored if s.pair.similarity < candidate]
    print(f"\n=== as the stage runs it: {len(below)} of {len(pairs)} pairs below the "
          f"{candidate:.2f} candidate threshold never reach the judge (→ independent) ===")
    for lang in [*langs, "total"]:
        chosen = [s for s in scored if lang in ("total", s.pair.lang)]
        stage: list[tuple[Relation, Relation]] = [
            (s.pair.label, "independent" if s.pair.similarity < candidate else s.predicted)
            for s in chosen
        ]
        n_below = sum(s.pair.similarity < candidate for s in chosen)
        print_table(f"[{lang}] stage view, {n_below} below threshold", stage)

    baseline: list[tuple[Relation, Relation]] = [
        (s.pair.label, "redundant" if s.pair.similarity >= merge else "independent")
        for s in scored
    ]
    stage_total = [
        (s.pair.label, "independent" if s.pair.similarity < candidate else s.predicted)
        for s in scored
    ]
    print("\n=== baseline: similarity alone (>= merge threshold → redundant, else independent) ===")
    print_table("[total] similarity-only baseline", baseline)
    print(f"\nstage accuracy, rules judge vs similarity-only baseline: "
          f"{accuracy(stage_total):.1%} vs {accuracy(baseline):.1%} "
          f"(ratio {accuracy(stage_total) / max(accuracy(baseline), 1e-9):.2f}x)")

    duplicate_recall(scored, candidate)
    near = asyncio.run(with_similarity(load_pairs(args.near_miss)))
    false_merges([judge_pair(p, merge) for p in near], candidate)

    if args.errors:
        print("\n=== misjudged pairs (judge in isolation) ===")
        for s in scored:
            if s.predicted != s.pair.label:
                print(f"  {s.pair.similarity:.3f} {s.pair.label} → {s.predicted}: "
                      f"{s.pair.old} | {s.pair.new}  ({s.reason})")


if __name__ == "__main__":
    main()

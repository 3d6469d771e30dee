"""Evidence recall of fast search on LoCoMo-format conversations, next to dense retrieval.

    python bench/retrieval_quality.py PATH [--chunk 5] [--conversations N] [--keep DIR]

PATH is a LoCoMo-format JSON file (a list of samples with ``conversation``: sessions
``session_N`` of turns ``{speaker, dia_id, text}`` and ``session_N_date_time``, and ``qa``:
``question``, ``evidence`` turn ids, ``category``). The data is not part of memstream: pass
its path (e.g. ``../shared/data/locomo-dev/locomo-dev.json``; read its README for the licence).

memstream: the embedded stack and a worker (rules extraction, local e5 embedder), one cube
per speaker; every session is published through ``MemoryClient.add_messages`` in chunks of
``--chunk`` turns (the cube's speaker as ``user``, the other speaker as a named
``assistant``), and each question is asked with fast search of both speakers' cubes; the two
lists are merged by score (identical texts once) and cut to k. Baseline, in the same run:
dense retrieval over the raw turns ("Speaker: text") with the same embedder (e5 passage and
query prefixes, exact cosine top-k over the conversation). Recall@k of a question = the
share of its evidence turn ids found among the sources of the top-k hits (a memory covers
the turn ids it cites, an episode all its turns). Questions of --skip-categories (default 5,
where no evidence answers) are left out; --category-names labels the per-category table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.streams.embed.local import LocalEmbedder  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.admin import worker_lag  # noqa: E402
from memstream.topics.client import MemoryClient  # noqa: E402
from memstream.topics.events import ScoredMemory, WriteToken  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

# Questions with no evidence to retrieve (LoCoMo's adversarial category) are left out by
# default; --skip-categories changes it, --category-names labels the per-category table.
DEFAULT_SKIP = "5"


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime
    session: str


@dataclass(frozen=True)
class Question:
    text: str
    evidence: frozenset[str]
    category: int


@dataclass(frozen=True)
class Conversation:
    name: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def _session_time(text: str) -> datetime:
    """A session time such as "9:05 am on 3 March, 2024" (the format of the data), as UTC."""
    return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(evidence: object, known: set[str]) -> frozenset[str]:
    """The turn ids an evidence field names: every token that is one of the conversation's
    turn ids (the field may be a list, or ids joined with ';' or spaces)."""
    text = " ".join(map(str, evidence)) if isinstance(evidence, list) else str(evidence)
    return frozenset(t for t in re.split(r"[\s;,]+", text) if t in known)


def load(path: Path, skip: set[int]) -> list[Conversation]:
    out = []
    for n, sample in enumerate(json.loads(path.read_text())):
        conv = sample["conversation"]
        turns: list[Turn] = []
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)),
                          key=lambda k: int(k.split("_")[1]))
        for key in sessions:
            start = _session_time(conv[f"{key}_date_time"])
            for i, turn in enumerate(conv[key]):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text = f"{text} [shares a photo: {turn['blip_caption']}]"
                turns.append(Turn(turn["dia_id"], turn["speaker"], text,
                                  start + timedelta(seconds=30 * i), key))
        known = {t.dia_id for t in turns}
        questions = tuple(
            Question(q["question"], ids, int(q["category"]))
            for q in sample["qa"] if int(q["category"]) not in skip
            and (ids := evidence_ids(q.get("evidence") or [], known)))
        out.append(Conversation(str(sample.get("sample_id", n)),
                                (conv["speaker_a"], conv["speaker_b"]), tuple(turns), questions))
    return out


def cube_of(conv: Conversation, speaker: str) -> str:
    return f"locomo-{conv.name}-{speaker}".lower().replace(" ", "-")


def covered(hit: ScoredMemory) -> set[str]:
    return {ref.message_id for ref in hit.item.metadata.sources if ref.message_id}


def recall_at(hits_sources: list[set[str]], evidence: frozenset[str], k: int) -> float:
    found: set[str] = set().union(*hits_sources[:k]) if hits_sources[:k] else set()
    return len(evidence & found) / len(evidence)


async def ingest(client: MemoryClient, convs: list[Conversation], chunk: int) -> int:
    """Publish every conversation into one cube per speaker; returns chunks published."""
    last: dict[str, WriteToken] = {}
    published = 0
    for conv in convs:
        for speaker in conv.speakers:
            cube = cube_of(conv, speaker)
            by_session: dict[str, list[Turn]] = defaultdict(list)
            for turn in conv.turns:
                by_session[turn.session].append(turn)
            for session, turns in by_session.items():
                for i in range(0, len(turns), chunk):
                    messages = [{"id": t.dia_id, "role": "user" if t.speaker == speaker
                                 else "assistant", "name": t.speaker, "content": t.text,
                                 "timestamp": t.at} for t in turns[i:i + chunk]]
                    last[cube] = await client.add_messages(cube, messages, session_id=session)
                    published += 1
    for token in last.values():
        await client.wait_applied(token, timeout=3600)
    return published


async def settle(settings: Settings, bootstrap: str, timeout: float = 3600) -> float:
    """Wait until every stage has processed its whole input (the optimizer included), so the
    searches see what the pipeline finally stores; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        pending = sum(sum(p.values()) for p in (await worker_lag(settings, bootstrap)).values())
        if pending == 0:
            return time.perf_counter() - t0
        await asyncio.sleep(2)
    raise TimeoutError(f"the pipeline still had records to process after {timeout:.0f}s")


async def memstream_hits(client: MemoryClient, conv: Conversation, q: Question,
                         k: int) -> list[set[str]]:
    results = await asyncio.gather(*(client.search(cube_of(conv, s), q.text, top_k=k)
                                     for s in conv.speakers))
    merged = sorted((h for hits in results for h in hits), key=lambda h: -h.score)
    seen: set[str] = set()
    out = []
    for hit in merged:
        text = " ".join(hit.item.memory.split())
        if text in seen:
            continue
        seen.add(text)
        out.append(covered(hit))
    return out[:k]


async def all_hits(client: MemoryClient, convs: list[Conversation], k: int,
                   concurrency: int) -> dict[tuple[str, str], list[set[str]]]:
    """Every question's merged hits, ``concurrency`` questions at a time."""
    slots = asyncio.Semaphore(concurrency)

    async def one(conv: Conversation, q: Question) -> list[set[str]]:
        async with slots:
            return await memstream_hits(client, conv, q, k)

    keys = [(c, q) for c in convs for q in c.questions]
    found = await asyncio.gather(*(one(c, q) for c, q in keys))
    return {(c.name, q.text): hits for (c, q), hits in zip(keys, found, strict=True)}


async def dense_hits(embedder: LocalEmbedder, convs: list[Conversation],
                     k: int) -> dict[tuple[str, str], list[set[str]]]:
    out: dict[tuple[str, str], list[set[str]]] = {}
    for conv in convs:
        passages = await embedder.embed_passages([f"{t.speaker}: {t.text}" for t in conv.turns])
        queries = await embedder.embed_queries([q.text for q in conv.questions])
        for q, qv in zip(conv.questions, queries, strict=True):
            top = np.argsort(-(passages @ qv), kind="stable")[:k]
            out[(conv.name, q.text)] = [{conv.turns[i].dia_id} for i in top]
    return out


def table(rows: dict[str, dict[int, list[float]]], ks: list[int]) -> None:
    print(f"{'retrieval':<34}" + "".join(f"{'R@' + str(k):>8}" for k in ks))
    for label, by_k in rows.items():
        print(f"{label:<34}" + "".join(f"{np.mean(by_k[k]):>8.3f}" for k in ks))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path)
    parser.add_argument("--chunk", type=int, default=5, help="turns per published chunk")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N")
    parser.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE[,…]",
                        help="also run the questions with these search settings changed "
                        "(e.g. episode_weight=1.0 or keyword_weight=0), same ingestion")
    parser.add_argument("--skip-categories", default=DEFAULT_SKIP, metavar="N[,N…]",
                        help="question categories left out (default: %(default)s, the "
                        "questions no evidence answers)")
    parser.add_argument("--category-names", default="", metavar="N=NAME[,…]",
                        help="labels for the per-category table, e.g. 1=multi-hop,2=temporal")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="questions searched at once (each searches every speaker's cube)")
    parser.add_argument("--keep", type=Path,
                        help="data dir to use and keep (default: temp); when it already holds "
                        "this ingestion, only the searches run again")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.path.is_file():
        parser.error(f"{args.path}: no such file")
    skip = {int(c) for c in args.skip_categories.split(",") if c.strip()}
    names = {int(k): v for k, v in (kv.split("=", 1) for kv in args.category_names.split(",")
                                    if "=" in kv)}
    convs = load(args.path, skip)[: args.conversations or None]
    ks = [1, 5, 10, 20]
    n_turns = sum(len(c.turns) for c in convs)
    n_questions = sum(len(c.questions) for c in convs)
    kept = sorted({q.category for c in convs for q in c.questions})
    print(f"{len(convs)} conversations, {n_turns} turns, {n_questions} questions "
          f"(categories {kept}), {2 * len(convs)} cubes, chunks of {args.chunk} turns",
          flush=True)

    with tempfile.TemporaryDirectory(prefix="memstream-rq-") as tmp:
        data = args.keep or Path(tmp)
        settings = Settings(data_dir=data, kafka={"partitions": 4})
        marker = data / "retrieval-quality.json"
        done = {"path": str(args.path.resolve()), "chunk": args.chunk,
                "conversations": args.conversations}
        async with EmbeddedStack(settings) as stack, \
                Worker(settings, stack.bootstrap, stack.graph_uri) as worker, \
                MemoryClient(settings, stack.bootstrap) as client:
            if marker.is_file() and json.loads(marker.read_text())["done"] == done:
                ingest_s, chunks = (json.loads(marker.read_text())[k] for k in ("s", "chunks"))
                print(f"reusing the ingestion in {data}")
            else:
                t0 = time.perf_counter()
                chunks = await ingest(client, convs, args.chunk)
                ingest_s = time.perf_counter() - t0
                marker.write_text(json.dumps({"done": done, "s": ingest_s, "chunks": chunks}))
            print(f"ingested {chunks} chunks ({2 * n_turns} turn copies) in {ingest_s:.0f}s "
                  f"({2 * n_turns / ingest_s:.1f} turns/s)", flush=True)
            waited = await settle(settings, stack.bootstrap)
            print(f"the optimizer finished its backlog {waited:.0f}s later", flush=True)
            assert worker.deps is not None
            counts = [await worker.deps.store.graph.count_by_type(cube_of(conv, s))
                      for conv in convs for s in conv.speakers]
            print("activated memories per cube (long-term / user / episodes): " + ", ".join(
                f"{c.get('LongTermMemory', 0)}/{c.get('UserMemory', 0)}/"
                f"{c.get('EpisodicMemory', 0)}" for c in counts), flush=True)
            t0 = time.perf_counter()
            ours = await all_hits(client, convs, max(ks), args.concurrency)
            search_s = time.perf_counter() - t0
            variants: dict[str, dict[tuple[str, str], list[set[str]]]] = {}
            default_search = worker.deps.settings.search
            for variant in args.variant:
                changes = dict(kv.split("=", 1) for kv in variant.split(","))
                changed = default_search.model_validate({**default_search.model_dump(),
                                                         **changes})
                worker.deps.settings = worker.deps.settings.model_copy(
                    update={"search": changed})
                variants[variant] = await all_hits(client, convs, max(ks), args.concurrency)
            worker.deps.settings = worker.deps.settings.model_copy(
                update={"search": default_search})
    dense = await dense_hits(LocalEmbedder(), convs, max(ks))

    rows: dict[str, dict[int, list[float]]] = {"dense over raw turns (baseline)": {},
                                                "memstream fast search": {}}
    for variant, hits in variants.items():
        rows[f"  variant {variant}"] = {k: [recall_at(hits[(c.name, q.text)], q.evidence, k)
                                           for c in convs for q in c.questions] for k in ks}
    per_cat: dict[str, dict[int, list[float]]] = {"dense": defaultdict(list),
                                                  "memstream": defaultdict(list)}
    for label, hits, cat_label in (("dense over raw turns (baseline)", dense, "dense"),
                                   ("memstream fast search", ours, "memstream")):
        for k in ks:
            rows[label][k] = [recall_at(hits[(c.name, q.text)], q.evidence, k)
                              for c in convs for q in c.questions]
        for c in convs:
            for q in c.questions:
                per_cat[cat_label][q.category].append(
                    recall_at(hits[(c.name, q.text)], q.evidence, 10))
    print()
    table(rows, ks)
    base10 = float(np.mean(rows["dense over raw turns (baseline)"][10]))
    ours10 = float(np.mean(rows["memstream fast search"][10]))
    print(f"\nrecall@10 ratio memstream / dense: {ours10 / base10:.2f}× "
          f"(goal: ≥ 0.75 and ≥ 1.3×, no category below dense)")
    print(f"\n{'category (recall@10)':<24}{'n':>5}{'dense':>8}{'memstream':>11}")
    for cat in sorted(per_cat["dense"]):
        d, m = per_cat["dense"][cat], per_cat["memstream"][cat]
        name = names.get(cat, f"category {cat}")
        print(f"{name:<24}{len(d):>5}{np.mean(d):>8.3f}{np.mean(m):>11.3f}")
    print(f"\ningest: {ingest_s:.0f}s through Kafka; {n_questions} questions × "
          f"{len(convs[0].speakers)} cubes searched in {search_s:.0f}s")


if __name__ == "__main__":
    asyncio.run(main())

"""The cross-lingual personal facts (``tests/data/crosslingual_facts.jsonl``): a fact said in
one language, asked about in the other. Read by the e2e test, its shape test and
``bench/crosslingual.py``, which all count hit@1 the same way: the first hit of a fast search
is the answering statement itself (not its episode, not a rival statement)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstream.client.client import MemoryClient
from memstream.topics.events import Message, ScoredMemory
from tests.support.paths import DATA

PATH = DATA / "crosslingual_facts.jsonl"
CHUNK = 3  # statements to a chat chunk, as in test_precise_hits: each gets an episode
SAID_FROM = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Statement:
    id: str
    lang: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    lang: str
    question: str
    answer: str  # the id of the statement that answers it


@dataclass(frozen=True)
class Cube:
    cube: str
    split: str  # "dev" (fixes were made looking at these) or "heldout"
    statements: tuple[Statement, ...]
    questions: tuple[Question, ...]

    def statement(self, statement_id: str) -> Statement:
        (found,) = [s for s in self.statements if s.id == statement_id]
        return found


@dataclass(frozen=True)
class Outcome:
    cube: Cube
    question: Question
    first: ScoredMemory | None

    @property
    def expected(self) -> Statement:
        return self.cube.statement(self.question.answer)

    @property
    def direction(self) -> str:
        """``zh->en``: the fact said in Chinese, asked about in English."""
        return f"{self.expected.lang}->{self.question.lang}"

    @property
    def hit(self) -> bool:
        return answers(self.first, self.question.answer)

    def miss_line(self) -> str:
        got = "nothing" if self.first is None else self.first.item.memory
        return (f"{self.cube.cube} [{self.direction}] {self.question.question!r}: expected "
                f"{self.expected.text!r}, first {got!r}")


def load(path: Path = PATH) -> list[Cube]:
    cubes = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        cubes.append(Cube(raw["cube"], raw["split"],
                          tuple(Statement(**s) for s in raw["statements"]),
                          tuple(Question(**q) for q in raw["questions"])))
    return cubes


def answers(hit: ScoredMemory | None, statement_id: str) -> bool:
    """The hit is the statement said in message ``statement_id``: a statement, not the episode
    holding it."""
    if hit is None or hit.item.metadata.memory_type == "EpisodicMemory":
        return False
    return any(s.kind == "message" and s.message_id == statement_id
               for s in hit.item.metadata.sources)


async def ingest(client: MemoryClient, cubes: Iterable[Cube], timeout: float = 300) -> None:
    """Every cube's statements as the user's chat messages, ``CHUNK`` to a chunk, a minute
    apart; returns once all are applied."""
    tokens = []
    for cube in cubes:
        for start in range(0, len(cube.statements), CHUNK):
            messages = [Message(id=s.id, role="user", content=s.text,
                                timestamp=SAID_FROM + timedelta(minutes=start + i))
                        for i, s in enumerate(cube.statements[start:start + CHUNK])]
            tokens.append(await client.add_messages(cube.cube, messages,
                                                    session_id=f"{cube.cube}-{start // CHUNK}"))
    for token in tokens:
        await client.wait_applied(token, timeout=timeout)


async def ask(client: MemoryClient, cubes: Iterable[Cube], top_k: int = 5) -> list[Outcome]:
    """Each question, one at a time, by fast search in its cube."""
    out = []
    for cube in cubes:
        for question in cube.questions:
            hits = await client.search(cube.cube, question.question, top_k=top_k)
            out.append(Outcome(cube, question, hits[0] if hits else None))
    return out


def rate(outcomes: Sequence[Outcome]) -> str:
    hits = sum(o.hit for o in outcomes)
    return f"{hits / len(outcomes):.3f} ({hits}/{len(outcomes)})" if outcomes else "- (0/0)"


def report(outcomes: Sequence[Outcome]) -> str:
    """hit@1 overall, per direction and per split, then every miss."""
    lines = [f"hit@1 {rate(outcomes)}"]
    for direction in sorted({o.direction for o in outcomes}):
        lines.append(f"  {direction}: {rate([o for o in outcomes if o.direction == direction])}")
    for split in sorted({o.cube.split for o in outcomes}):
        lines.append(f"  {split}: {rate([o for o in outcomes if o.cube.split == split])}")
    lines.extend(f"  miss {o.miss_line()}" for o in outcomes if not o.hit)
    return "\n".join(lines)

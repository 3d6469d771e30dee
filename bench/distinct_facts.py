"""Distinct facts stay distinct: no true fact is merged away, and each one can be found.

    python bench/distinct_facts.py [--users 20] [--facts 500] [--seed 7]
    python bench/distinct_facts.py --users 2 --facts 100        # a quick check

Generates, per user, distinct statements about many different people from four
templates ("<Name> lives in <city>.", "<Name> works as a <job>.", "<Name>'s favourite
food is <food>.", "<Name> plays the <instrument> every weekend."), with full names
(first names repeat across people, surnames tell them apart) and a deterministic seed.
Starts the embedded stack (noida-db broker, FalkorDB, a worker with the rules LLM and
the local e5 embedder) in a temporary directory on free ports, adds every user's facts
with ``client.add_memories``, waits until they are applied, then checks per user:
how many of the facts are still activated (every one must be: different facts are
never merged), and for each fact a question about it ("Where does Anna Kowalski
live?") through fast search, top_k=10: hit@10 (goal ≥ 0.99). Prints the figures and
the elapsed times; ``--errors`` lists the archived facts and the missed questions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.settings import KafkaSettings, Settings  # noqa: E402


def _split(words: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(words.split(sep))


FIRST = _split("Anna Boris Carla David Elena Farid Greta Hugo Ines Jonas Kofi Lena Marta Nils Olga "
         "Pavel Quentin Rosa Sven Tomas Uma Viktor Wen Xavier Yusuf Zoe Amira Bruno Chiara "
         "Dmitri Esther Felix Hana Igor Julia Karim Lucia Mateo Nadia Oscar")
LAST = _split("Kowalski Nowak Schmidt Weber Rossi Bianchi Silva Santos Dubois Martin Jensen Larsen "
        "Novak Horvat Ivanova Petrov Tanaka Sato Kim Park Chen Wang Garcia Lopez Murphy Kelly "
        "Fischer Wagner Costa Moreau Lindqvist Berg Haddad Mensah Okafor Duarte Varga Kaplan "
        "Moretti Keller")
CITIES = _split("Lisbon Oslo Kyoto Lima Cairo Quebec Hanoi Tbilisi Perth Vienna Madrid Dublin "
                "Prague Warsaw Athens Nairobi Seoul Bogota Helsinki Zagreb Porto Krakow Osaka "
                "Montreal Edinburgh")
JOBS = _split("nurse|teacher|pilot|carpenter|lawyer|dentist|baker|architect|librarian|plumber|"
        "journalist|pharmacist|electrician|translator|accountant|firefighter|chef|gardener|"
        "photographer|veterinarian", "|")
FOODS = _split("sushi|ramen|lasagna|paella|dumplings|tacos|falafel|goulash|pierogi|risotto|curry|"
         "pho|moussaka|ceviche|kimchi stew|fish and chips|pad thai|couscous|borscht|"
         "shakshuka", "|")
INSTRUMENTS = _split("violin|cello|piano|guitar|flute|trumpet|saxophone|drums|clarinet|harp|"
               "accordion|banjo|ukulele|oboe|trombone|mandolin", "|")
TEMPLATES = (
    ("{name} lives in {value}.", "Where does {name} live?", CITIES),
    ("{name} works as a {value}.", "What does {name} work as?", JOBS),
    ("{name}'s favourite food is {value}.", "What is {name}'s favourite food?", FOODS),
    ("{name} plays the {value} every weekend.", "Which instrument does {name} play every "
     "weekend?", INSTRUMENTS),
)


SEARCHES_IN_FLIGHT = 8


@dataclass(frozen=True)
class Fact:
    text: str
    question: str


def generate(user: int, n: int, seed: int) -> list[Fact]:
    """``n`` distinct facts: each person gets one fact per template, people are distinct names."""
    rng = random.Random(f"{seed}-{user}")
    people = rng.sample([f"{f} {s}" for f in FIRST for s in LAST], -(-n // len(TEMPLATES)))
    facts = []
    for i in range(n):
        name = people[i // len(TEMPLATES)]
        statement, question, values = TEMPLATES[i % len(TEMPLATES)]
        value = rng.choice(values)
        facts.append(Fact(statement.format(name=name, value=value), question.format(name=name)))
    rng.shuffle(facts)
    return facts


@dataclass
class UserResult:
    user: str
    activated: int
    hits: int
    archived: list[str]
    missed: list[str]


async def check_user(client: MemoryClient, user: str, facts: list[Fact]) -> UserResult:
    texts = {f.text for f in facts}
    nodes = await client.get_all(user, memory_type="LongTermMemory", limit=len(facts) * 4)
    active = {n.memory for n in nodes if n.metadata.status == "activated"}
    gate = asyncio.Semaphore(SEARCHES_IN_FLIGHT)

    async def found(fact: Fact) -> bool:
        async with gate:
            hits = await client.search(user, fact.question, top_k=10, mode="fast")
        return any(s.item.memory == fact.text for s in hits)

    ok = await asyncio.gather(*(found(f) for f in facts))
    missed = [f"{f.question} → {f.text}" for f, hit in zip(facts, ok, strict=True) if not hit]
    return UserResult(user, len(texts & active), sum(ok), sorted(texts - active), missed)


async def run(users: int, per_user: int, seed: int, show_errors: bool) -> None:
    logging.basicConfig(level=logging.WARNING)
    data = {f"facts-u{u:02d}-{uuid.uuid4().hex[:4]}": generate(u, per_user, seed)
            for u in range(users)}
    with tempfile.TemporaryDirectory(prefix="memstream-distinct-") as tmp:
        settings = Settings(data_dir=Path(tmp), kafka=KafkaSettings(partitions=4))
        started = time.perf_counter()
        async with EmbeddedStack(settings) as stack, \
                Worker(settings, stack.bootstrap, stack.graph_uri), \
                MemoryClient(settings, stack.bootstrap) as client:
            print(f"embedded stack in {tmp}: kafka {stack.bootstrap}, graph {stack.graph_uri}; "
                  f"{users} users × {per_user} facts, seed {seed}")
            t0 = time.perf_counter()
            tokens = [await client.add_memories(user, [f.text for f in facts])
                      for user, facts in data.items()]
            published = time.perf_counter() - t0
            for token in tokens:
                await client.wait_applied(token, timeout=3600)
            applied = time.perf_counter() - t0
            t1 = time.perf_counter()
            results = [await check_user(client, user, facts) for user, facts in data.items()]
            checked = time.perf_counter() - t1
        total = time.perf_counter() - started

    n = users * per_user
    print(f"\n{'user':<22}{'activated':>11}{'hit@10':>9}")
    for r in results:
        print(f"{r.user:<22}{r.activated:>7}/{per_user:<4}{r.hits / per_user:>8.3f}")
    activated = sum(r.activated for r in results)
    hits = sum(r.hits for r in results)
    print(f"\nfacts still activated: {activated}/{n} ({activated / n:.2%}; goal 100%), "
          f"min per user {min(r.activated for r in results)}/{per_user}")
    print(f"hit@10 (fast search, top_k=10): {hits / n:.4f} ({hits}/{n}; goal ≥ 0.99)")
    print(f"added {n} facts in {applied:.1f}s ({n / applied:.1f} facts/s; publishing "
          f"{published:.1f}s), {n} searches in {checked:.1f}s "
          f"({checked / n * 1000:.1f} ms each, {SEARCHES_IN_FLIGHT} in flight), "
          f"{total:.1f}s in all")
    if show_errors:
        for r in results:
            for text in r.archived:
                print(f"  archived  {r.user}: {text}")
            for miss in r.missed:
                print(f"  missed    {r.user}: {miss}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--facts", type=int, default=500, help="facts per user")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--errors", action="store_true",
                        help="list the archived facts and the missed questions")
    args = parser.parse_args()
    asyncio.run(run(args.users, args.facts, args.seed, args.errors))


if __name__ == "__main__":
    main()

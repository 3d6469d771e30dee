"""Scale-out: one worker against N sharing one broker, FalkorDB and a Milvus standalone server.

    python bench/scale.py [--chunks 120] [--cubes 12] [--workers 3] [--partitions 6]

Starts the embedded broker and FalkorDB, and a real Milvus 2.3 standalone server (the
``milvus`` package's ``milvus-server``, as tests/support/milvus_fixtures.py does), all
under a temporary directory. Each round has its own topics (``--partitions`` each), graph
and collection; the workers are ``memstream worker`` processes (bench/load.py's
``WorkerProcess``) in one consumer group.

1. one worker: publish ``--chunks`` conversation chunks (bench/ingest.py's three-message
   chunks) over ``--cubes`` cubes at once, wait until every cube's last chunk is applied:
   chunks/s and memories/s;
2. shared: ``--workers`` workers, the same load;
3. takeover: ``--workers`` workers, the load published, and ``--stop-after`` seconds later
   the worker holding the most ingestion partitions (``conversations``, ``memory.items``)
   with records not yet committed is killed (SIGKILL; ``--sigterm`` stops it cleanly): the
   seconds until each of those partitions (every pending one, when the broker does not say
   who holds what) gets a commit again (from a survivor), and until
   the whole load is applied. If they get none within ``--takeover-timeout`` seconds, the
   round says so with the group's state and members, and its stores are read as they are.

Then each round's stores are read back and compared with the one-worker round (the rules
extraction is deterministic, and a memory's id is derived from its cube, chunk and place in
the chunk, so every round should store the very same facts): per cube, the fact nodes by id
and by text, each with its vector on the Milvus server, and every chunk of the load with at
least one fact. ``lost`` counts the one-worker round's facts missing from a round;
``duplicated`` counts node ids listed twice and texts stored more often than there.

On a 2-core machine the workers share the same cores, so more workers do not multiply the
throughput; the rounds show what sharing costs and how fast a dead worker's partitions move.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.admin import AIOKafkaAdminClient  # noqa: E402
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment  # noqa: E402
from ingest import chunk_messages  # noqa: E402
from load import STORED_TYPES, WorkerProcess, bench_settings, group_offsets  # noqa: E402

from memstream.client.client import ClientError, MemoryClient  # noqa: E402
from memstream.kafka.admin import _admin  # noqa: E402
from memstream.kafka.members import owner_of  # noqa: E402
from memstream.local.milvus_server import MilvusServer  # noqa: E402
from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.sinks.graph.factory import create_graph_store  # noqa: E402
from memstream.sinks.ports import Filter  # noqa: E402
from memstream.sinks.vector.factory import create_vector_store  # noqa: E402
from memstream.topics.events import WriteToken  # noqa: E402
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402

DIM = 384  # the local multilingual-e5-small embedder the workers use
PREFIX = "b"  # chunk_messages' message ids: b<chunk>-<message>

TP = tuple[str, int]


@dataclass
class CubeFacts:
    """One cube's stored fact nodes, as the stores hold them after a round."""

    ids: list[str] = field(default_factory=list)  # as listed: an id twice is a duplicate
    texts: Counter[str] = field(default_factory=Counter)
    chunks: set[int] = field(default_factory=set)  # chunks some fact names as its source
    without_vector: int = 0


@dataclass
class Round:
    label: str
    workers: int
    seconds: float
    stored: dict[str, CubeFacts]
    partitions_used: int = 0
    takeover_s: float | None = None
    watched: list[TP] = field(default_factory=list)  # the killed worker's pending partitions
    victim_known: bool = True
    stuck: list[TP] = field(default_factory=list)  # watched, still without a commit at the end
    group: str = ""  # the group's state and members when the takeover timed out
    complete: bool = True  # every cube's last chunk applied

    @property
    def memories(self) -> int:
        return sum(len(f.ids) for f in self.stored.values())


def cubes_of(n: int) -> list[str]:
    return [f"scale{c}" for c in range(n)]


async def publish(client: MemoryClient, chunks: int, cubes: list[str]
                  ) -> tuple[dict[str, WriteToken], set[int]]:
    """Every chunk at once; each cube's last token, and the partitions the chunks went to."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    last: dict[str, WriteToken] = {}
    for i in range(chunks):
        cube = cubes[i % len(cubes)]
        last[cube] = await client.add_messages(cube, chunk_messages(i, base, PREFIX))
    return last, {t.partition for t in last.values()}


async def read_stores(settings: Settings, graph_uri: str, cubes: list[str]
                      ) -> dict[str, CubeFacts]:
    """Each cube's long-term and user facts (any status), their chunks and their vectors."""
    graph = create_graph_store(settings, graph_uri)
    vectors = create_vector_store(settings, DIM)
    out: dict[str, CubeFacts] = {}
    try:
        for cube in cubes:
            nodes = await graph.find_nodes(cube, [
                Filter("memory_type", "in", list(STORED_TYPES)),
                Filter("hierarchy_level", "=", "fact"), Filter("type", "!=", "reasoning")])
            facts = CubeFacts(ids=[n.id for n in nodes], texts=Counter(n.memory for n in nodes))
            for n in nodes:
                for ref in n.metadata.sources:
                    mid = ref.message_id or ""
                    if mid.startswith(PREFIX) and "-" in mid:
                        facts.chunks.add(int(mid[len(PREFIX):].split("-", 1)[0]))
            ids = sorted(set(facts.ids))
            found = {r.id for r in await vectors.get(cube, ids)} if ids else set()
            facts.without_vector = len(set(ids) - found)
            out[cube] = facts
    finally:
        await graph.close()
        await vectors.close()
    return out


async def assignments(admin: AIOKafkaAdminClient, group: str) -> dict[int, set[TP]]:
    """The partitions each worker process (by pid, from its client id) holds in ``group``."""
    owned: dict[int, set[TP]] = {}
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            for member in described[5]:
                owner, raw = owner_of(member[1]), member[4]
                if owner is None or not raw:
                    continue
                try:
                    assignment = ConsumerProtocolMemberAssignment.decode(raw)
                except Exception as exc:  # noqa: BLE001 - another format: owner unknown
                    logging.warning("assignment of %s unreadable: %r", member[1], exc)
                    continue
                owned.setdefault(owner[0], set()).update(
                    (tp.topic, tp.partition) for tp in assignment.partitions())
    return owned


async def group_state(admin: AIOKafkaAdminClient, group: str) -> str:
    """The group's state and its members (client ids), as the coordinator describes them."""
    out = []
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            members = ", ".join(f"{m[1]} ({'assigned' if m[4] else 'no assignment'})"
                                for m in described[5])
            out.append(f"{described[2]}, {len(described[5])} members: {members}")
    return "; ".join(out) or "not described"


def round_settings(data: Path, label: str, bootstrap: str, graph_uri: str, milvus_uri: str,
                   partitions: int) -> Settings:
    settings = bench_settings(data, label, bootstrap, graph_uri)
    return settings.model_copy(update={
        "vector": settings.vector.model_copy(update={"uri": milvus_uri}),
        "kafka": settings.kafka.model_copy(update={"partitions": partitions}),
    })


async def run_round(label: str, data: Path, bootstrap: str, graph_uri: str, milvus_uri: str,
                    args: argparse.Namespace, workers: int, stop: int | None = None) -> Round:
    settings = round_settings(data, label, bootstrap, graph_uri, milvus_uri, args.partitions)
    env = {"MEMSTREAM_KAFKA__PARTITIONS": str(args.partitions)}
    procs = [WorkerProcess(settings.model_copy(update={"data_dir": settings.data_dir / f"w{i}"}),
                           data / f"{label}-worker{i}.log", env) for i in range(workers)]
    cubes = cubes_of(args.cubes)
    ingest = {CONVERSATIONS.name(settings), MEMORY_ITEMS.name(settings)}
    takeover: float | None = None
    watched: list[TP] = []
    watch: dict[TP, int] = {}
    known, complete, group = True, True, ""
    until = 3600.0  # seconds the whole load may take to be applied
    try:
        for proc in procs:  # one after the other: each start loads the embedding model
            await proc.start()
        async with MemoryClient(settings, bootstrap) as client, \
                group_offsets(settings, bootstrap) as read, _admin(bootstrap) as admin:
            await asyncio.sleep(3)  # let the group settle on its members
            t0 = time.perf_counter()
            last, used = await publish(client, args.chunks, cubes)
            if stop is not None:
                await asyncio.sleep(args.stop_after)  # every worker consuming, records pending
                before = await read()
                pending = {tp: c for tp, (c, e) in before.items() if e > c and tp[0] in ingest}
                owned = await assignments(admin, settings.app_id)
                held = {p.pid: owned.get(p.pid, set()) & pending.keys() for p in procs}
                victim = max(procs, key=lambda p: len(held[p.pid]))
                known = bool(held[victim.pid])
                # unknown owners (the broker did not describe them): watch every pending one
                watch = {tp: pending[tp] for tp in held[victim.pid]} if known else pending
                watched = sorted(watch)
                t_stop = time.perf_counter()
                await victim.stop(stop)
                while watch and time.perf_counter() - t_stop < args.takeover_timeout:
                    now = await read()
                    watch = {tp: c for tp, c in watch.items() if now[tp][0] == c}
                    await asyncio.sleep(0.2)
                if watch:  # no takeover: say what the group looks like, then read the stores
                    group = await group_state(admin, settings.app_id)
                    until = 30.0
                else:
                    takeover = time.perf_counter() - t_stop
            end = time.perf_counter() + until
            try:
                for token in last.values():
                    await client.wait_applied(token, timeout=max(1.0, end - time.perf_counter()))
            except ClientError:
                complete = False
            elapsed = time.perf_counter() - t0
    finally:
        for proc in procs:
            await proc.stop()
    stored = await read_stores(settings, graph_uri, cubes)
    return Round(label, workers, elapsed, stored, len(used), takeover, watched, known,
                 sorted(watch), group, complete)


def differences(base: Round, r: Round, chunks: int, cubes: int) -> dict[str, int]:
    """What ``r``'s stores hold against the one-worker round's, counted per cube."""
    out: Counter[str] = Counter()
    for cube, facts in r.stored.items():
        ref = base.stored[cube]
        out["lost"] += len(set(ref.ids) - set(facts.ids))
        out["unexpected ids"] += len(set(facts.ids) - set(ref.ids))
        twice_ids = sum(n - 1 for n in Counter(facts.ids).values() if n > 1)
        allowed = ref.texts if r is not base else Counter(dict.fromkeys(facts.texts, 1))
        out["duplicated"] += twice_ids + sum(max(0, n - allowed[t]) for t, n in facts.texts.items())
        out["without a vector"] += facts.without_vector
    mine = {c: f"scale{c % cubes}" for c in range(chunks)}
    out["chunks without facts"] = sum(c not in r.stored[cube].chunks for c, cube in mine.items())
    return dict(out)


def report(rounds: list[Round], args: argparse.Namespace, stop: signal.Signals) -> None:
    base = rounds[0]
    stop_name = "killed" if stop == signal.SIGKILL else "stopped"
    print(f"\n{args.chunks} chunks × 3 messages over {args.cubes} cubes (on {base.partitions_used} "
          f"of {args.partitions} partitions), {args.partitions} partitions per topic; vectors on "
          "the Milvus server")
    names = {"one": "one worker", "shared": f"{args.workers} workers sharing",
             "takeover": f"{args.workers} workers, one {stop_name} mid-load"}
    print(f"{'round':<36}{'seconds':>9}{'chunks/s':>10}{'memories':>10}{'memories/s':>12}")
    for r in rounds:
        if not r.complete:
            print(f"{names[r.label]:<36}{'gave up':>9}{'-':>10}{r.memories:>10}{'-':>12}"
                  f"  (after {r.seconds:.0f}s, not every chunk applied)")
            continue
        print(f"{names[r.label]:<36}{r.seconds:>9.1f}{args.chunks / r.seconds:>10.2f}"
              f"{r.memories:>10}{r.memories / r.seconds:>12.2f}")
    print(f"{args.workers} workers / one: {base.seconds / rounds[1].seconds:.2f}× throughput")
    t = rounds[2]
    where = ", ".join(f"{topic.split('.', 1)[-1]}[{p}]" for topic, p in t.watched)
    whose = ("the killed worker's ingestion partitions with pending records" if t.victim_known
             else "every ingestion partition with pending records (owners not described)")
    if t.takeover_s is not None:
        print(f"takeover: {whose} ({where or 'none'}) got a commit again {t.takeover_s:.1f}s "
              f"after its {stop.name}")
    else:
        stuck = ", ".join(f"{topic.split('.', 1)[-1]}[{p}]" for topic, p in t.stuck)
        print(f"takeover: NONE within {args.takeover_timeout:.0f}s of the {stop.name}: of {whose} "
              f"({where}), {stuck} got no commit; the group then: {t.group}")
    print("from the stores, against the one-worker round (fact nodes by id and text per cube, "
          "their vectors, each chunk's facts):")
    for r in rounds:
        d = differences(base, r, args.chunks, args.cubes)
        rest = ", ".join(f"{k} {v}" for k, v in d.items() if k not in ("lost", "duplicated"))
        print(f"  {names[r.label]}: lost: {d['lost']}, duplicated: {d['duplicated']} "
              f"({r.memories} facts; {rest})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=120)
    parser.add_argument("--cubes", type=int, default=12)
    parser.add_argument("--workers", type=int, default=3,
                        help="workers of the shared and the takeover rounds")
    parser.add_argument("--partitions", type=int, default=6,
                        help="partitions of every topic (at least --workers)")
    parser.add_argument("--stop-after", type=float, default=5.0,
                        help="seconds after publishing before one worker is killed")
    parser.add_argument("--takeover-timeout", type=float, default=300.0,
                        help="seconds the killed worker's partitions may go without a commit")
    parser.add_argument("--sigterm", action="store_true",
                        help="stop that worker with SIGTERM (a clean leave) instead of SIGKILL")
    parser.add_argument("--kill", action="store_true", help=argparse.SUPPRESS)  # the default now
    args = parser.parse_args()
    if args.workers < 2 or args.partitions < args.workers:
        parser.error("--workers must be at least 2 and at most --partitions")
    logging.basicConfig(level=logging.WARNING)
    stop = signal.SIGTERM if args.sigterm else signal.SIGKILL
    with tempfile.TemporaryDirectory(prefix="ms-scale-") as tmp:
        data = Path(tmp)
        milvus = MilvusServer(data / "milvus", startup_timeout_s=300, stop_timeout_s=20)
        t = time.perf_counter()
        milvus_uri = milvus.start()
        print(f"Milvus standalone at {milvus_uri} (ready in {time.perf_counter() - t:.0f}s)",
              flush=True)
        try:
            async with EmbeddedStack(Settings(data_dir=data)) as stack:
                b, g = stack.bootstrap, stack.graph_uri
                rounds = []
                for label, n, sig in (("one", 1, None), ("shared", args.workers, None),
                                      ("takeover", args.workers, stop)):
                    r = await run_round(label, data, b, g, milvus_uri, args, n, sig)
                    print(f"round {label} ({n} worker{'s' if n > 1 else ''}): {r.seconds:.1f}s, "
                          f"{r.memories} memories", flush=True)
                    rounds.append(r)
        finally:
            with contextlib.suppress(Exception):
                milvus.stop()
    report(rounds, args, stop)


if __name__ == "__main__":
    asyncio.run(main())

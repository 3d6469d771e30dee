"""Periodic structure optimization: parentless facts → concept → topic tree.

A scope is (cube, memory type). It runs only when nodes arrived since its last run,
never twice at once. Candidates are activated facts without a parent; clusters of
their embeddings get a ``concept`` summary node with ``PARENT`` edges to the members,
and groups of concepts a ``topic`` node above them. Summary ids derive from their
members, so a re-run over the same members rewrites the same nodes and edges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from memstream.kafka import tracing
from memstream.streams import metering
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.members import MemberNote, repeats_a_member
from memstream.streams.prompts.summaries import CLUSTER_SUMMARIES, SummariesContext
from memstream.streams.prompts.summary import SummaryContext
from memstream.streams.reorganize import asof
from memstream.streams.reorganize.clustering import (
    FloatArray,
    centrality,
    centroid_of,
    hierarchy,
    language_labels,
)
from memstream.streams.reorganize.writes import complete, written_by
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id, stable_id
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, StoredMemoryType
from memstream.topics.registry import MEMORY_UPDATES

log = logging.getLogger("memstream.optimize")
STAGE = "optimizer"
Scope = tuple[str, str, StoredMemoryType]  # (cube, user, memory type)


@dataclass
class Scopes:
    """Which scopes have new nodes, which are being optimized right now, and the last window
    of event time each scope's adds reached (``window``)."""

    dirty: set[Scope] = field(default_factory=set)
    running: set[Scope] = field(default_factory=set)
    runs: int = 0
    windows: dict[Scope, int] = field(default_factory=dict)

    def mark(self, scope: Scope) -> None:
        self.dirty.add(scope)

    def of_cube(self, cube_id: str) -> list[Scope]:
        return sorted(s for s in self.dirty if s[0] == cube_id)

    def crossed(self, scope: Scope, at: datetime, interval_s: float) -> datetime | None:
        """The start of ``at``'s window of event time if the scope's adds just entered it.

        Runs are placed by the log, not the wall clock, so every run of the same input makes
        them at the same points; after a restart the first add runs its window's boundary
        again, which changes nothing (a run as of a position is a function of the log)."""
        window = int(at.timestamp() // interval_s)
        last = self.windows.get(scope)
        if last is not None and window <= last:
            return None
        return datetime.fromtimestamp(window * interval_s, tz=UTC)

    def passed(self, scope: Scope, boundary: datetime, interval_s: float) -> None:
        """The run at ``boundary`` is done: only now (a failed run is retried with its event)."""
        self.windows[scope] = int(boundary.timestamp() // interval_s)


def _announce(deps: Deps, scope: Scope, action: str, node: MemoryItem | None,
              edges: Sequence[Edge] = ()) -> Outgoing:
    what = node.id if node else ",".join(f"{e.source}>{e.target}" for e in edges)
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("optimize", action, what), user_id=scope[1],
        cube_id=scope[0], occurred_at=deps.clock(), action=action,  # type: ignore[arg-type]
        stage=STAGE, node_id=node.id if node else None, node=node, edges=tuple(edges),
        reason="structure optimization"))


async def _summaries(deps: Deps, scope: Scope, clusters: Sequence[Sequence[MemoryItem]],
                     level: Literal["topic", "concept"], vectors: Sequence[FloatArray],
                     at: datetime) -> list[MemoryItem | None]:
    """Each cluster's summary node: the one made before, or written from one call for all the
    clusters that have none yet (None where the answer gave none)."""
    ids = [stable_id("summary", scope[0], level, *sorted(m.id for m in members))
           for members in clusters]
    found: list[MemoryItem | None] = [await deps.query.get_node(scope[0], i) for i in ids]
    todo = [n for n, made in enumerate(found) if made is None]
    if not todo:
        return found
    ctx = SummariesContext(level=level, clusters=[
        SummaryContext(level=level, members=[MemberNote.of(m) for m in clusters[n]],
                       centrality=centrality(vectors[n])) for n in todo])
    try:
        answer = await deps.llm.run(CLUSTER_SUMMARIES, ctx)
    except LLMError as exc:
        log.warning("summaries of %d clusters failed: %s", len(todo), exc)
        return found
    stamp = at  # the position of the run: later runs know this parent is older than them
    for k, n in enumerate(todo):
        if (made := answer.summary_for(k)) is None:
            continue
        if repeats_a_member(made.value, (m.memory for m in clusters[n])):
            log.debug("summary of %d nodes repeats one of them: not written", len(clusters[n]))
            continue
        found[n] = MemoryItem(id=ids[n], memory=made.value, metadata=MemoryMetadata(
            user_id=scope[1], cube_id=scope[0], memory_type=scope[2], type="topic",
            key=made.key, tags=tuple(made.tags), hierarchy_level=level,
            background=made.background, source="retrieved", written_by=written_by(deps),
            created_at=stamp, updated_at=stamp))
    return found


async def _write_tree(deps: Deps, scope: Scope, parent: MemoryItem,
                      children: Sequence[MemoryItem]) -> list[Outgoing]:
    """Write a summary and its ``PARENT`` edges (idempotent) and announce both, every time:
    a re-run announces under the same ids, so an announcement lost in a crash is made."""
    if await deps.query.get_node(scope[0], parent.id) is None:
        [vector] = await node_vectors(deps.embedder, [parent])
        await deps.store.write([(parent, vector)])
    else:
        await complete(deps, scope[0], [parent.id])
    edges = [Edge(source=parent.id, target=c.id, type="PARENT") for c in children]
    await deps.store.add_edges(scope[0], edges)
    return [_announce(deps, scope, "added", parent), _announce(deps, scope, "linked", None, edges)]


async def optimize_scope(deps: Deps, scope: Scope, at: datetime) -> list[Outgoing]:
    """One optimization run over a scope's parentless facts as of ``at`` (a position in the
    log's event time: the facts before it, with the status and parents they had then)."""
    cube, _, memory_type = scope
    candidates = await asof.optimization_candidates(deps, cube, memory_type, (at, ""))
    records = {r.id: r for r in await deps.query.vectors(cube, [n.id for n in candidates])}
    rows = [n for n in candidates if n.id in records]
    if len(rows) < 2:
        return []
    vectors = np.asarray([records[n.id].vector for n in rows], dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    tree = await asyncio.to_thread(hierarchy, vectors,
                                   languages=language_labels([n.memory for n in rows]))
    out: list[Outgoing] = []
    # A concept stands in a topic by the centroid of its members.
    centroids = [centroid_of(vectors[members]) for members in tree.concepts]
    members_of = [[rows[i] for i in members] for members in tree.concepts]
    concepts = await _summaries(deps, scope, members_of, "concept",
                                [vectors[members] for members in tree.concepts], at)
    for concept, children in zip(concepts, members_of, strict=True):
        if concept is not None:
            out += await _write_tree(deps, scope, concept, children)
    groups = [[i for i in group if concepts[i] is not None] for group in tree.topics]
    groups = [g for g in groups if len(g) >= 2]
    topics = await _summaries(deps, scope, [[c for i in g if (c := concepts[i])] for g in groups],
                              "topic", [np.stack([centroids[i] for i in g]) for g in groups], at)
    for topic, group in zip(topics, groups, strict=True):
        if topic is not None:
            out += await _write_tree(deps, scope, topic, [c for i in group
                                                          if (c := concepts[i])])
    log.info("optimized %s/%s: %d candidates, %d concepts, %d topics", cube, memory_type,
             len(rows), len(tree.concepts), len(tree.topics))
    return out


async def run_scopes(deps: Deps, scopes: Scopes, which: Sequence[Scope],
                     at: datetime) -> list[Outgoing]:
    """Optimize the given scopes as of ``at``, skipping any that is already running."""
    out: list[Outgoing] = []
    for scope in which:
        if scope in scopes.running:
            continue
        scopes.dirty.discard(scope)
        scopes.running.add(scope)
        metering.enter(STAGE, scope[0])  # its summaries' LLM tokens are the cube's
        try:  # a failure fails the event that placed the run: it is retried, never skipped
            with tracing.span("memstream.optimizer.structure", {
                    "memstream.cube_id": scope[0], "memstream.memory_type": scope[2]}):
                out += await optimize_scope(deps, scope, at)
            scopes.runs += 1
        finally:
            scopes.running.discard(scope)
    return out


async def run_windows(deps: Deps, scopes: Scopes, event: ReorganizeEvent) -> list[Outgoing]:
    """Structure optimization every ``optimize_interval_s`` of the log's event time: each
    window a scope's facts enter is optimized once, as of the window's start, when its first
    fact is handled. Fact by fact, in the order the log added them, so how facts were
    grouped into events (the live add stage's batches, a replay's steps) changes nothing."""
    if not deps.settings.reorganize.enabled:
        return []
    found = {n.id: n for n in await deps.query.get_nodes(event.cube_id, event.node_ids)}
    interval = deps.settings.reorganize.optimize_interval_s
    out: list[Outgoing] = []
    for node in (found[i] for i in event.node_ids if i in found):
        kind = node.metadata.memory_type
        if kind not in ("LongTermMemory", "UserMemory"):
            continue
        scope: Scope = (event.cube_id, event.user_id, kind)
        scopes.mark(scope)
        boundary = scopes.crossed(scope, node.metadata.updated_at, interval)
        if boundary is None:
            continue
        out += await run_scopes(deps, scopes, [scope], boundary)
        scopes.passed(scope, boundary, interval)
    return out

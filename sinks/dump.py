"""Dump a cube to a JSON file, load it back, and keep rotating backups.

The file is a ``CubeGraph``: nodes, edges, and each node's vector. Vectors are
float32 in Milvus; JSON keeps their exact value, so a round trip is lossless.
Files are written to a temporary name, fsynced and renamed, so a crash never
leaves half a backup behind (and ``backup_cube`` drops a cube only after that).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.ports import StoreError
from memstream.topics.models import CubeGraph, MemoryItem, utcnow

Clock = Callable[[], datetime]
_STAMP = "%Y%m%dT%H%M%S%fZ"
_BACKUP = re.compile(r"^(?P<stem>.+)--(?P<stamp>\d{8}T\d{12}Z)(?:-(?P<n>\d+))?\.json$")
_VECTOR_BATCH = 1000


@dataclass(frozen=True)
class BackupResult:
    path: Path
    removed: tuple[Path, ...]  # older backups deleted beyond ``keep_last``
    nodes: int
    edges: int
    vectors: int
    dropped: bool


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


async def export_cube(store: MemoryStore, cube_id: str) -> CubeGraph:
    """Nodes and edges from the graph, plus the vector of every node that has one."""
    graph = await store.graph.export_cube(cube_id)
    ids = [n.id for n in graph.nodes]
    vectors: dict[str, list[float]] = {}
    for start in range(0, len(ids), _VECTOR_BATCH):
        for record in await store.vectors.get(cube_id, ids[start : start + _VECTOR_BATCH]):
            vectors[record.id] = [float(x) for x in record.vector]
    access = await store.graph.get_cube_access(cube_id)
    return graph.model_copy(update={"vectors": vectors,
                                    "owner": access.owner if access is not None else None})


async def dump_cube(store: MemoryStore, cube_id: str, path: Path | str) -> CubeGraph:
    """Write the cube to ``path`` as JSON; returns what was written."""
    cube = await export_cube(store, cube_id)
    text = cube.model_dump_json(indent=1)
    await asyncio.to_thread(_write_atomic, Path(path), text)
    return cube


def _retarget(cube: CubeGraph, cube_id: str) -> CubeGraph:
    def move(node: MemoryItem) -> MemoryItem:
        return node.evolve(cube_id=cube_id)

    return cube.model_copy(update={"cube_id": cube_id, "nodes": tuple(map(move, cube.nodes))})


async def load_cube(
    store: MemoryStore, path: Path | str, cube_id: str | None = None, replace: bool = False
) -> CubeGraph:
    """Load a dump (into ``cube_id`` if given). Idempotent: nodes, vectors and edges are upserts.

    ``replace`` first erases what the target cube holds, so it ends up exactly as dumped.
    Nodes go in with their vectors as consistency units, then the edges.
    """
    text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
    try:
        cube = CubeGraph.model_validate_json(text)
    except ValueError as exc:
        raise StoreError(f"{path} is not a memstream cube dump: {exc}") from exc
    if cube_id is not None and cube_id != cube.cube_id:
        cube = _retarget(cube, cube_id)
    foreign = [n.id for n in cube.nodes if n.metadata.cube_id != cube.cube_id]
    if foreign:
        raise StoreError(f"{path}: nodes {foreign[:5]} do not belong to cube {cube.cube_id!r}")
    if replace:
        await store.clear_cube(cube.cube_id)
    with_vectors = [(n, cube.vectors[n.id]) for n in cube.nodes if n.id in cube.vectors]
    without = [n for n in cube.nodes if n.id not in cube.vectors]
    await store.write(with_vectors)
    if without:
        await store.graph.upsert_nodes(cube.cube_id, without)
    await store.graph.add_edges(cube.cube_id, cube.edges)
    return cube


def backup_stem(cube_id: str) -> str:
    """A file-name-safe, collision-free prefix for a cube's backups."""
    digest = hashlib.sha256(cube_id.encode()).hexdigest()[:12]
    return f"{quote(cube_id, safe='')[:80]}-{digest}"


def list_backups(directory: Path | str, cube_id: str) -> list[Path]:
    """The cube's backups in ``directory``, oldest first."""
    stem = backup_stem(cube_id)
    found: list[tuple[str, int, Path]] = []
    folder = Path(directory)
    if not folder.is_dir():
        return []
    for path in folder.iterdir():
        m = _BACKUP.match(path.name)
        if m and m["stem"] == stem:
            found.append((m["stamp"], int(m["n"] or 0), path))
    return [p for _, _, p in sorted(found)]


async def backup_cube(
    store: MemoryStore,
    cube_id: str,
    directory: Path | str,
    keep_last: int = 5,
    drop: bool = True,
    clock: Clock = utcnow,
) -> BackupResult:
    """Write a timestamped dump, delete the cube's backups beyond the newest ``keep_last``,
    then (``drop``) erase the cube from graph and vectors."""
    if keep_last < 1:
        raise StoreError("keep_last must be at least 1 (the backup just written)")
    folder = Path(directory)
    now = clock()
    if now.tzinfo is None:
        raise StoreError("the backup clock must return timezone-aware datetimes")
    base = f"{backup_stem(cube_id)}--{now.astimezone(UTC).strftime(_STAMP)}"
    path = folder / f"{base}.json"
    n = 0
    while path.exists():  # same clock reading twice: keep both
        n += 1
        path = folder / f"{base}-{n}.json"
    cube = await dump_cube(store, cube_id, path)
    backups = list_backups(folder, cube_id)
    removed = tuple(backups[:-keep_last]) if len(backups) > keep_last else ()
    for old in removed:
        await asyncio.to_thread(old.unlink, missing_ok=True)
    if drop:
        await store.clear_cube(cube_id)
    return BackupResult(
        path=path,
        removed=removed,
        nodes=len(cube.nodes),
        edges=len(cube.edges),
        vectors=len(cube.vectors),
        dropped=drop,
    )


def stamp_of(path: Path) -> datetime | None:
    """When a backup was taken, from its file name."""
    m = _BACKUP.match(path.name)
    return datetime.strptime(m["stamp"], _STAMP).replace(tzinfo=UTC) if m else None

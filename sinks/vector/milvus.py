"""The VectorStore adapter for Milvus: a Milvus Lite file (``x.db``) or a server URI.

Cube scoping, measured at 100k x 384 on Milvus Lite (bench/stores.py, top-10 with
cube + type + status filters): one partition per cube p50 ~6 ms; a cube filter over
one collection ~69 ms, with a ``cube_id`` partition key ~65 ms (Lite does not
prune by it); HNSW was slower than FLAT at this size (28 ms per cube, recall 0.97).
``partitioning="auto"`` therefore picks one partition per cube on Lite, and a
partition key on a server, where partitions are capped (~1024) and the key is pruned;
what an older server cannot do is decided from its version (sinks/vector/features.py).

Blocking pymilvus calls run in ``asyncio.to_thread``: pymilvus 3's
AsyncMilvusClient works with Lite but is marked experimental and shares one
connection per event loop keyed by ``id(loop)``, which goes stale when a loop
is replaced (tests, restarts); it measured no faster (1.6 vs 1.5 ms per call).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import grpc
from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from memstream.sinks.freshness import reads_relaxed
from memstream.sinks.ports import CubeRows, Pause, StoreError, VectorHit, VectorQuery, VectorRecord
from memstream.sinks.vector.errors import store_error
from memstream.sinks.vector.expr import (
    Expression,
    cube_expression,
    query_vector,
    render,
    search_expression,
)
from memstream.sinks.vector.features import ServerFeatures
from memstream.sinks.vector.schema import (
    REQUIRED_FIELDS,
    SCALAR_FIELDS,
    IndexType,
    build_schema,
    from_row,
    partition_name,
    row_key,
    search_params,
    split_rows,
    to_row,
)
from memstream.topics.models import Status

Partitioning = Literal["auto", "cube", "key", "none"]
Consistency = Literal["Strong", "Bounded", "Session", "Eventually"]
_BATCH = 500
_OUTPUT = [*SCALAR_FIELDS, "vector"]
log = logging.getLogger("memstream.milvus")
_PAGE = 10_000  # rows per query page (Milvus caps offset + limit at 16,384)
_KEYS = 16**4  # a primary key's first four hex digits, the unit all_rows slices by
_SLICE_ROWS = 128  # rows per slice of a cube read whole: ~30 ms of Milvus Lite
_MAX_SLICES = 16  # a big cube: bigger slices, since each one scans its partition
LITE_CONNECT_ATTEMPTS = 3  # opening a Lite file: tries before the error
_LITE_LOCK = threading.Lock()
_LITE_USERS: dict[str, int] = {}
# Milvus Lite applies a write to its write-ahead log without a lock of its own: two writes
# at once (two cubes' batches, each in its own thread) interleave their bytes, and the
# next start after a crash stops reading the log at the torn batch and loses every write
# after it (``WAL recovery stopped at batch boundary N``: 54 acknowledged vectors gone in
# one kill test). Writes to a Lite file therefore go one at a time.
_LITE_WRITES: dict[str, threading.Lock] = {}
_WRITE_METHODS = frozenset({"insert", "upsert", "delete", "flush", "create_partition",
                            "drop_partition", "create_collection", "drop_collection",
                            "create_index", "drop_index"})
# Reads that take a consistency level on a server (the collection's is ``Strong``).
_READ_METHODS = frozenset({"search", "query", "get"})


def _check_scipy_once() -> None:
    """pymilvus looks for ``scipy.sparse`` on a client's first search by executing that
    module by hand, outside the import lock: the first searches of two cubes at once (each
    in a thread of its own) ran it twice concurrently, and one failed with "partially
    initialized module 'scipy.sparse._bsr'" (a worker's first searches after a start, while
    no cube's vectors were held yet). Done once, here, before any thread searches."""
    from pymilvus.client import utils

    with _LITE_LOCK:
        check = getattr(getattr(utils, "SciPyHelper", None), "_init", None)
        if callable(check):
            check()


class MilvusVectorStore:
    """Embeddings keyed by (cube, node id) in one Milvus collection, searched within one cube.

    ``templates`` sends filter values as Milvus expression templates instead of escaped
    literals. ``None`` (the default) asks the server: on from Milvus 2.5, which introduced
    them; off for Lite and older servers, whose parsers reject ``{p0}``.

    On a server, reads are ``Strong`` (they see every acknowledged write), except under
    ``sinks.freshness.relaxed_reads``, where they use ``relaxed_consistency``.
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        dim: int,
        token: str | None = None,
        index_type: IndexType = "FLAT",
        partitioning: Partitioning = "auto",
        templates: bool | None = None,
        flush_after_rows: int = 1000,
        relaxed_consistency: Consistency = "Bounded",
    ) -> None:
        if dim <= 0:
            raise StoreError(f"vector dimension must be positive, got {dim}")
        _check_scipy_once()
        self._lite = uri.endswith(".db")
        self._uri = str(Path(uri).expanduser().resolve()) if self._lite else uri
        self._write_lock: threading.Lock | None = None  # one per Lite file, see _LITE_WRITES
        if self._lite:
            with _LITE_LOCK:
                self._write_lock = _LITE_WRITES.setdefault(self._uri, threading.Lock())
        self._collection = collection
        self._dim = dim
        self._token = token or ""
        self._index_type: IndexType = index_type
        if partitioning == "auto":
            partitioning = "cube" if self._lite else "key"
        self._partitioning: Partitioning = partitioning
        self._templates_setting = templates
        self._relaxed_consistency: Consistency = relaxed_consistency
        self._templates = bool(templates) and not self._lite
        self._client: MilvusClient | None = None
        self._features: ServerFeatures | None = None  # a server's, once connected
        self._ready = False
        self._lock = asyncio.Lock()
        self._partitions: set[str] = set()
        # Rows written since the last flush. Milvus Lite searches unflushed (growing)
        # segments about 10x slower than sealed ones, so a background flush seals them
        # once this many rows have piled up.
        self._flush_after_rows = flush_after_rows
        self._unflushed = 0
        self._flushing: asyncio.Task[None] | None = None

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def is_lite(self) -> bool:
        """A Milvus Lite file (one process per file) rather than a server."""
        return self._lite

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def partitioning(self) -> Partitioning:
        return self._partitioning

    # -- lifecycle ------------------------------------------------------------------

    def _connect(self) -> MilvusClient:
        if not self._lite:
            try:
                return MilvusClient(uri=self._uri, token=self._token)
            except (MilvusException, grpc.RpcError) as exc:
                raise store_error(f"cannot connect to Milvus at {self._uri}", exc) from exc
        Path(self._uri).parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(LITE_CONNECT_ATTEMPTS):
            try:
                client = MilvusClient(uri=self._uri)
                break
            except MilvusException as exc:
                # Milvus Lite's local server can drop a channel with a transient GOAWAY
                # ("too many pings", seen once in CI): a fresh connection then succeeds
                if attempt + 1 < LITE_CONNECT_ATTEMPTS:
                    log.warning("opening Milvus Lite file %s failed (%s); trying again",
                                self._uri, exc.message)
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise StoreError(
                    f"cannot open Milvus Lite file {self._uri}: {exc.message}. Milvus Lite "
                    "allows one process per file; if another process holds it, point "
                    "vector.uri at a Milvus server or give each process its own file"
                ) from exc
        with _LITE_LOCK:
            _LITE_USERS[self._uri] = _LITE_USERS.get(self._uri, 0) + 1
        return client

    async def ensure_collection(self) -> None:
        async with self._lock:
            if self._ready:
                return
            if self._client is None:
                self._client = await asyncio.to_thread(self._connect)
                if not self._lite:
                    await self._adapt_to_server()
            if not await self._call("has_collection", self._collection):
                schema, index = build_schema(
                    self._dim, self._partitioning == "key", self._index_type
                )
                try:
                    await self._call(
                        "create_collection",
                        self._collection,
                        schema=schema,
                        consistency_level="Strong",
                    )
                except StoreError:
                    if not await self._call("has_collection", self._collection):
                        raise  # not a lost creation race
            await self._check_existing()
            if not await self._call("list_indexes", self._collection):
                _, index = build_schema(self._dim, False, self._index_type)
                # sync=False: pymilvus otherwise sleeps 0.5 s polling an empty index.
                await self._call("create_index", self._collection, index, sync=False)
            await self._call("load_collection", self._collection)
            if self._partitioning == "cube":
                await self._adopt_partitions()
            self._ready = True

    async def _adapt_to_server(self) -> None:
        """Pick the filter style and cube layout this server handles (see milvus_features)."""
        features = ServerFeatures.from_version(str(await self._call("get_server_version")))
        self._features = features
        if self._templates_setting is None:
            self._templates = features.templates
        if self._partitioning == "key" and not features.partition_key:
            log.info(
                "Milvus %s misroutes upserts with a partition key: %s filters cubes instead",
                features.version, self._collection,
            )
            self._partitioning = "none"

    async def _check_existing(self) -> None:
        info = await self._call("describe_collection", self._collection)
        fields = {f["name"]: f for f in info.get("fields", [])}
        missing = REQUIRED_FIELDS - fields.keys()
        if missing:
            raise StoreError(
                f"collection {self._collection} exists but lacks memstream fields "
                f"{sorted(missing)}; set another vector.collection"
            )
        dim = int(fields["vector"].get("params", {}).get("dim", 0))
        if dim != self._dim:
            raise StoreError(
                f"collection {self._collection} has dimension {dim} but the embedder produces "
                f"{self._dim}; use the embedder the collection was built with, or set a new "
                "vector.collection and re-embed the cubes (memstream dump, then load)"
            )
        # The existing layout decides: a partition key, rows in the default partition, or cubes.
        if fields["cube_id"].get("is_partition_key"):
            if self._features is not None and not self._features.partition_key:
                raise StoreError(
                    f"collection {self._collection} has a cube_id partition key, which Milvus "
                    f"{self._features.version} fills wrongly on upsert; use Milvus 2.4 or later, "
                    "or set another vector.collection"
                )
            self._partitioning = "key"
        elif self._partitioning == "key":
            self._partitioning = "none"

    async def _adopt_partitions(self) -> None:
        """The cubes' partitions, unless rows already sit in the default one (an older
        layout): then every cube is read there too, with a warning."""
        # One row read, not count(*): Milvus Lite 3.2 counts the whole collection whatever
        # partition it is asked about, so every restart once gave up partitions and put
        # each new cube in the default one, where every read scans every cube there.
        rows = await self._call(
            "query",
            self._collection,
            filter="",
            output_fields=["pk"],
            limit=1,
            partition_names=["_default"],
        )
        if rows:
            self._partitioning = "none"
            log.warning(
                "collection %s keeps rows in its default partition: cubes share it, and "
                "each read of a cube scans all of them (slower as cubes are added); to "
                "lay cubes out one partition each, set a new vector.collection and load "
                "the cubes' dumps into it (memstream dump, then load)", self._collection)
            return
        self._partitions = set(await self._call("list_partitions", self._collection))

    async def close(self) -> None:
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
            self._flushing = None
        client, self._client, self._ready = self._client, None, False
        if client is None:
            return
        await asyncio.to_thread(client.close)
        if self._lite:
            await asyncio.to_thread(_release_lite, self._uri)

    async def flush(self) -> None:
        """Seal and persist buffered rows (Milvus Lite builds ANN indexes on sealed segments)."""
        await self.ensure_collection()
        await self._call("flush", self._collection)

    async def purge_deleted(self, cube_id: str) -> None:
        """Erasure on disk (``sinks.erasure``): Milvus Lite rewrites the cube's partition
        without its deleted rows now; a server is asked to compact (it does so in the
        background: see docs/erasure.md)."""
        await self.ensure_collection()
        if not self._lite:
            await self._call("flush", self._collection)
            await self._call("compact", self._collection)
            return
        from memstream.sinks.vector.lite_purge import purge_partition

        part = partition_name(cube_id) if self._partitioning == "cube" else "_default"
        lock = self._write_lock or threading.Lock()  # every Lite store has one

        def purge() -> int:
            with lock:
                return purge_partition(self._uri, self._collection, part)
        await asyncio.to_thread(purge)

    async def drop(self) -> None:
        """Drop the whole collection (tests; re-embedding into a fresh collection)."""
        await self.ensure_collection()
        await self._call("drop_collection", self._collection)
        self._ready = False
        self._partitions.clear()

    # -- helpers --------------------------------------------------------------------

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._client is None:
            raise StoreError("vector store is closed")
        call = getattr(self._client, method)
        if not self._lite and method in _READ_METHODS and reads_relaxed():
            kwargs.setdefault("consistency_level", self._relaxed_consistency)
        if self._write_lock is not None and method in _WRITE_METHODS:
            lock = self._write_lock

            def locked(*a: Any, _call: Any = call, **kw: Any) -> Any:
                with lock:
                    return _call(*a, **kw)
            call = locked
        try:
            return await asyncio.to_thread(call, *args, **kwargs)
        except (MilvusException, grpc.RpcError) as exc:  # an outage pauses the stage
            raise store_error(f"milvus {method} on {self._collection}", exc) from exc

    def _filter(self, expr: Expression) -> dict[str, Any]:
        if self._templates:
            return {"filter": expr.text, "filter_params": expr.params}
        return {"filter": render(expr.text, expr.params)}

    async def _partition(self, cube_id: str, create: bool) -> str | None:
        """The cube's partition ("" when not partitioning by cube); None when it has no rows."""
        await self.ensure_collection()
        if self._partitioning != "cube":
            return ""
        name = partition_name(cube_id)
        if name in self._partitions:
            return name
        if not await self._call("has_partition", self._collection, name):
            if not create:
                return None
            try:
                await self._call("create_partition", self._collection, name)
            except StoreError:
                if not await self._call("has_partition", self._collection, name):
                    raise
        self._partitions.add(name)
        return name

    @staticmethod
    def _read_kw(part: str) -> dict[str, Any]:
        return {"partition_names": [part]} if part else {}

    @staticmethod
    def _write_kw(part: str) -> dict[str, Any]:
        return {"partition_name": part} if part else {}

    # -- VectorStore ------------------------------------------------------------------

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        by_cube: dict[str, dict[str, dict[str, Any]]] = {}
        for record in records:  # validate everything before writing anything
            by_cube.setdefault(record.cube_id, {})[record.id] = to_row(record, self._dim)
        for cube_id, rows in by_cube.items():
            part = await self._partition(cube_id, create=True) or ""
            batch = list(rows.values())
            for start in range(0, len(batch), _BATCH):
                chunk = batch[start : start + _BATCH]
                await self._call("upsert", self._collection, chunk, **self._write_kw(part))
        self._unflushed += len(records)
        if self._unflushed >= self._flush_after_rows and (
                self._flushing is None or self._flushing.done()):
            self._unflushed = 0
            self._flushing = asyncio.create_task(self._background_flush())

    async def _background_flush(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # noqa: BLE001 - a later flush retries; searches still work
            log.warning("background flush of %s failed: %s", self._collection, exc)

    async def delete(self, cube_id: str, ids: Sequence[str]) -> None:
        part = await self._partition(cube_id, create=False)
        keys = list(dict.fromkeys(row_key(cube_id, i) for i in ids))
        if part is None or not keys:
            return
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            await self._call("delete", self._collection, ids=chunk, **self._write_kw(part))

    async def get(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]:
        """Stored records among ``ids``, in the order given."""
        part = await self._partition(cube_id, create=False)
        wanted = list(dict.fromkeys(ids))
        if part is None or not wanted:
            return []
        found: dict[str, VectorRecord] = {}
        keys = [row_key(cube_id, i) for i in wanted]
        for start in range(0, len(keys), _BATCH):
            rows = await self._call(
                "get",
                self._collection,
                ids=keys[start : start + _BATCH],
                output_fields=_OUTPUT,
                **self._read_kw(part),
            )
            found.update((row["id"], from_row(row)) for row in rows)
        return [found[i] for i in wanted if i in found]

    async def all_records(self, cube_id: str) -> list[VectorRecord]:
        """Every record of the cube, with its vector (dumps, tests)."""
        rows = await self.all_rows(cube_id)
        return [replace(r, vector=v.tolist())
                for r, v in zip(rows.records, rows.vectors, strict=True)]

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        """Every record of the cube, read in slices of its primary keys (hex digests, so a
        range holds its share of the cube): first 1/64 of the key space, whose rows tell
        the cube's size, then the rest in slices of about ``_SLICE_ROWS``. Milvus Lite
        answers one request at a time and takes ~0.2 ms a row with its vector (1,200 rows:
        ~300 ms): a search waits for one slice at most, when ``between`` (awaited before
        each slice) lets it go first. Each slice is read with ``strict_float32`` (the
        vectors stay one numpy array) and split in a thread: the event loop converts no
        float."""
        part = await self._partition(cube_id, create=False)
        if part is None:
            return CubeRows.empty(self._dim)
        first = await self._slice(cube_id, part, 0, _KEYS // 64, between)
        estimate = len(first.records) * 64
        count = max(1, min(_MAX_SLICES, -(-estimate // _SLICE_ROWS)))
        start = _KEYS // 64
        edges = [start + (_KEYS - start) * i // count for i in range(count)] + [_KEYS]
        return CubeRows.joined([first] + [await self._slice(cube_id, part, lo, hi, between)
                                          for lo, hi in itertools.pairwise(edges)])

    async def _slice(self, cube_id: str, part: str, lo: int, hi: int,
                     between: Pause | None) -> CubeRows:
        """The cube's rows whose primary key falls in [lo, hi) of its first four hex digits."""
        expr = cube_expression(cube_id)
        expr.clauses.append(f"pk >= {expr.param(f'{lo:04x}')}")
        if hi < _KEYS:
            expr.clauses.append(f"pk < {expr.param(f'{hi:04x}')}")
        pages: list[CubeRows] = []
        read = 0
        while True:  # a slice of more than _PAGE rows: a huge cube, pages of it
            if between is not None:
                await between()
            rows = await self._call(
                "query", self._collection, output_fields=_OUTPUT, limit=_PAGE, offset=read,
                strict_float32=True, **self._filter(expr), **self._read_kw(part),
            )
            read += len(rows)
            pages.append(await asyncio.to_thread(split_rows, rows, self._dim))
            if len(rows) < _PAGE:
                return CubeRows.joined(pages)

    async def list_ids(self, cube_id: str) -> list[str]:
        """Every node id with a vector in the cube, sorted (repair and dump walk these)."""
        part = await self._partition(cube_id, create=False)
        if part is None:
            return []
        expr = self._filter(cube_expression(cube_id))
        rows = await self._call(
            "query", self._collection, output_fields=["id"], **expr, **self._read_kw(part)
        )
        return sorted(row["id"] for row in rows)

    async def count(self, cube_id: str | None = None) -> int:
        if cube_id is None:
            await self.ensure_collection()
            rows = await self._call(
                "query", self._collection, filter="", output_fields=["count(*)"]
            )
        else:
            part = await self._partition(cube_id, create=False)
            if part is None:
                return 0
            expr = self._filter(cube_expression(cube_id))
            rows = await self._call(
                "query",
                self._collection,
                output_fields=["count(*)"],
                **expr,
                **self._read_kw(part),
            )
        return int(rows[0]["count(*)"]) if rows else 0

    async def search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        """Top-k by cosine similarity (higher is closer) within one cube."""
        target = query_vector(query.vector, self._dim)
        expr = search_expression(cube_id, query)
        part = await self._partition(cube_id, create=False)
        if part is None or expr.empty or query.top_k <= 0:
            return []
        result = await self._call(
            "search",
            self._collection,
            data=[target.tolist()],
            limit=query.top_k,
            # a hit's vector is 384 floats to send and decode: only when the caller reads it
            output_fields=_OUTPUT if query.with_vectors else SCALAR_FIELDS,
            search_params=search_params(self._index_type, query.top_k),
            **self._filter(expr),
            **self._read_kw(part),
        )
        rows = result[0] if result else []
        return [
            VectorHit(r["entity"]["id"], float(r["distance"]), from_row(r["entity"])) for r in rows
        ]

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> None:
        """Get and re-upsert: partial updates are not in every Milvus version (one writer/cube)."""
        records = await self.get(cube_id, ids)
        changed = [replace(r, status=status) for r in records if r.status != status]
        if changed:
            await self.upsert(changed)

    async def clear_cube(self, cube_id: str) -> int:
        existing = await self.count(cube_id)
        part = await self._partition(cube_id, create=False)
        if part is None or existing == 0:
            return 0
        expr = self._filter(cube_expression(cube_id))
        await self._call("delete", self._collection, **expr, **self._write_kw(part))
        return existing


def _release_lite(path: str) -> None:
    """Stop the in-process Milvus Lite server when the last store using it closes."""
    with _LITE_LOCK:
        users = _LITE_USERS.get(path, 0) - 1
        if users > 0:
            _LITE_USERS[path] = users
            return
        _LITE_USERS.pop(path, None)
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)

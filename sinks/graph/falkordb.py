"""GraphStore on FalkorDB through its native client (``falkordb.asyncio``).

Each GRAPH.QUERY is atomic in FalkorDB, but there are no multi-statement transactions:
``_write_all`` runs its statements one after another. Parameters travel in the client's
``CYPHER name=value`` header, quoted and escaped by the client; a NUL character would cut
that header short, so it is refused before anything is sent. Doubles come back with 15
significant digits (the server's reply format). Replies holding only scalars, lists and
maps (every node read: ``properties(n)``) are read by ``_cell`` here; the client, which
awaits a coroutine per value, reads the others (nodes, edges, paths, points, temporals).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import QUERY_CMD, RO_QUERY_CMD
from falkordb.asyncio.query_result import QueryResult
from falkordb.exceptions import SchemaVersionMismatchException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memstream.sinks.graph import cypher
from memstream.sinks.graph.store import DEFAULT_BATCH, CypherGraphStore, Row, Statement
from memstream.sinks.ports import StoreError, StoreUnavailable

# redis-py 8 reads with a 5 s timeout unless told otherwise. A graph write of a large batch,
# or any query while the server forks a snapshot of a big graph, may take longer; a read cut
# off there would be sent again (harmless: every statement is an upsert or a MERGE) and could
# time out again forever. So replies are awaited as long as they take, and only the connect
# is bounded: a server that is not there fails in seconds.
CONNECT_TIMEOUT_S = 5.0


def _check_nul(value: object) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise StoreError("FalkorDB cannot store text containing a NUL character")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_nul(key)
            _check_nul(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_nul(item)


class _NotScalar(Exception):
    """A reply cell ``_cell`` leaves to the client: a node, an edge, a path, a point, a
    vector or a temporal value."""


_NULL, _STRING, _INTEGER, _BOOLEAN, _DOUBLE, _ARRAY, _MAP = 1, 2, 3, 4, 5, 6, 10


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cell(cell: Sequence[Any]) -> Any:
    """One cell of a compact reply (``[type, value]``), read as the client reads it but in
    one plain call: the client awaits a coroutine per value, and for a node read
    (``properties(n)``: ~26 values) that was most of the read's time on the worker
    (``bench/retrieval_quality.py``: 75 nodes, 1.5 ms in FalkorDB, 10 ms parsing)."""
    kind, value = cell[0], cell[1]
    if kind == _STRING:
        return _text(value)
    if kind == _NULL:
        return None
    if kind == _INTEGER:
        return int(value)
    if kind == _ARRAY:
        return [_cell(v) for v in value]
    if kind == _MAP:
        return {_text(value[i]): _cell(value[i + 1]) for i in range(0, len(value), 2)}
    if kind == _BOOLEAN:
        return _text(value) == "true"
    if kind == _DOUBLE:
        return float(value)
    raise _NotScalar


def _plain(value: Any) -> Any:
    """OrderedDicts from the client as plain dicts (lists recursively)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class FalkorDBGraphStore(CypherGraphStore):
    """One FalkorDB graph (a Redis key) holding every cube; cubes are told apart by ``cube_id``."""

    def __init__(
        self,
        uri: str,
        graph_name: str,
        *,
        batch_size: int = DEFAULT_BATCH,
        dialect: cypher.Dialect = cypher.FALKORDB,
    ) -> None:
        super().__init__(dialect, batch_size)
        if not graph_name:
            raise StoreError("graph_name must not be empty")
        self.uri = uri
        self.graph_name = graph_name
        self._db = FalkorDB.from_url(
            uri, socket_timeout=None, socket_connect_timeout=CONNECT_TIMEOUT_S)
        self._graph = self._db.select_graph(graph_name)

    async def close(self) -> None:
        await self._db.aclose()

    async def purge_deleted(self, cube_id: str) -> None:
        """Erasure on disk (``sinks.erasure``): the server rewrites its append-only file and
        RDB snapshot from what it holds now, so deleted text leaves its files. First the
        graph's telemetry stream goes: FalkorDB keeps recent queries there (a Redis key,
        saved with the rest) with their parameters written into the query text. It writes
        them a moment after each query, so a server that keeps telemetry can put text
        back after this delete; the embedded server runs with it off (``CMD_INFO no``)."""
        from memstream.sinks.erasure import rewrite_redis_files

        try:
            await self._db.connection.delete(f"telemetry{{{self.graph_name}}}")
            await rewrite_redis_files(self._db.connection)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreError(f"FalkorDB could not rewrite its files after erasing {cube_id!r}: "
                             f"{exc}") from exc

    async def drop_graph(self) -> None:
        """Delete the whole graph key (every cube in it); tests and ``memstream down --wipe``."""
        try:
            await self._graph.delete()
        except RedisError as exc:
            if "empty key" not in str(exc) and "no such key" not in str(exc).lower():
                raise StoreError(f"FalkorDB: {exc}") from exc

    async def _send(self, query: str, params: Mapping[str, object],
                    read_only: bool) -> tuple[list[str], list[list[Any]]]:
        """The query's column names and rows. The command is the client's own (its
        parameter header, the compact reply); the reply is read by ``_cell`` when it holds
        only scalars, lists and maps, else by the client (which also raises its errors)."""
        graph = self._graph
        command = (RO_QUERY_CMD if read_only else QUERY_CMD, graph.name,
                   graph._build_params_header(dict(params)) + query, "--compact")
        response = await graph.execute_command(*command)
        if not isinstance(response[0], ResponseError) \
                and not isinstance(response[-1], ResponseError):
            if len(response) == 1:  # statistics only: a write that returns nothing
                return [], []
            with contextlib.suppress(_NotScalar):
                return ([str(column[1]) for column in response[0]],
                        [[_cell(cell) for cell in row] for row in response[1]])
        result = QueryResult(graph)
        try:
            await result.parse(response)
        except SchemaVersionMismatchException as exc:
            await graph.schema.refresh(exc.version)
            raise
        return ([str(column[1]) for column in result.header],
                [[_plain(v) for v in row] for row in result.result_set])

    async def _run(self, query: str, params: Mapping[str, object], read_only: bool) -> list[Row]:
        _check_nul(params)
        try:
            try:
                result = await self._send(query, params, read_only)
            except RedisConnectionError:
                # The pool's idle connections may all be to a server that has died since
                # (``memstream up`` restarts it on the same address): each would fail once.
                # Drop them and send again on a new one; a server still down fails again.
                # Every statement is an upsert or a MERGE, so sending one twice is harmless.
                pool = getattr(self._db.connection, "connection_pool", None)
                if pool is not None:
                    await pool.disconnect(inuse_connections=False)
                result = await self._send(query, params, read_only)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailable(f"FalkorDB at {self.uri} unreachable: {exc}") from exc
        except RedisError as exc:
            if read_only and "empty key" in str(exc):
                return []  # nothing was ever written to this graph
            first_line = query.strip().splitlines()[0] if query.strip() else ""
            raise StoreError(f"FalkorDB query failed ({first_line} ...): {exc}") from exc
        names, rows = result
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def _read(self, query: str, params: Mapping[str, object]) -> list[Row]:
        return await self._run(query, params, read_only=True)

    async def _write(self, query: str, params: Mapping[str, object]) -> list[Row]:
        return await self._run(query, params, read_only=False)

    async def _write_all(self, statements: Sequence[Statement]) -> list[list[Row]]:
        return [await self._write(query, params) for query, params in statements]

    async def _schema(self, statement: str) -> None:
        await self._write(statement, {})

"""GraphStore on Neo4j 5 through the official async ``neo4j`` driver.

Reads and writes are managed transactions (``execute_read`` / ``execute_write``): the
driver retries them on transient errors, which is safe because every write here is an
idempotent MERGE / SET / DELETE. Statements of one ``_write_all`` share a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from neo4j import AsyncGraphDatabase, AsyncManagedTransaction
from neo4j.exceptions import (
    ConnectionAcquisitionTimeoutError,
    DatabaseUnavailable,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)

from memstream.sinks.graph import cypher
from memstream.sinks.graph.store import DEFAULT_BATCH, CypherGraphStore, Row, Statement
from memstream.sinks.ports import StoreError, StoreUnavailable

# A lost or refused connection, a database not (yet) available: outages, not bad events.
UNREACHABLE = (ServiceUnavailable, SessionExpired, DatabaseUnavailable,
               ConnectionAcquisitionTimeoutError, OSError)


async def _run(tx: AsyncManagedTransaction, query: str, params: Mapping[str, object]) -> list[Row]:
    # The driver types queries as LiteralString to keep user text out of them. Ours are
    # built only from constants, whitelisted identifiers and validated integers
    # (sinks.graph.cypher); user values travel in ``params``.
    result = await tx.run(query, dict(params))
    return [dict(record) for record in await result.data()]


class Neo4jGraphStore(CypherGraphStore):
    """One Neo4j database holding every cube; cubes are told apart by ``cube_id``."""

    def __init__(
        self,
        uri: str,
        username: str | None,
        password: str | None,
        database: str | None,
        *,
        batch_size: int = DEFAULT_BATCH,
        dialect: cypher.Dialect = cypher.NEO4J,
        connection_acquisition_timeout_s: float = 60.0,
        **driver_options: Any,
    ) -> None:
        super().__init__(dialect, batch_size)
        auth = None if username is None else (username, password or "")
        self.uri = uri
        self.database = database or None
        self._driver = AsyncGraphDatabase.driver(
            uri,
            auth=auth,
            connection_acquisition_timeout=connection_acquisition_timeout_s,
            **driver_options,
        )

    async def close(self) -> None:
        await self._driver.close()

    async def _read(self, query: str, params: Mapping[str, object]) -> list[Row]:
        try:
            async with self._driver.session(database=self.database) as session:
                return await session.execute_read(_run, query, params)
        except (Neo4jError, DriverError) as exc:
            raise self._error(query, exc) from exc

    async def _write(self, query: str, params: Mapping[str, object]) -> list[Row]:
        try:
            async with self._driver.session(database=self.database) as session:
                return await session.execute_write(_run, query, params)
        except (Neo4jError, DriverError) as exc:
            raise self._error(query, exc) from exc

    async def _write_all(self, statements: Sequence[Statement]) -> list[list[Row]]:
        async def work(tx: AsyncManagedTransaction) -> list[list[Row]]:
            return [await _run(tx, query, params) for query, params in statements]

        if not statements:
            return []
        try:
            async with self._driver.session(database=self.database) as session:
                return await session.execute_write(work)
        except (Neo4jError, DriverError) as exc:
            raise self._error(statements[0][0], exc) from exc

    async def _schema(self, statement: str) -> None:
        # DDL cannot share a transaction with data writes: run it as an auto-commit query.
        try:
            async with self._driver.session(database=self.database) as session:
                result = await session.run(statement)
                await result.consume()
        except (Neo4jError, DriverError) as exc:
            raise self._error(statement, exc) from exc

    def _error(self, query: str, exc: Exception) -> StoreError:
        first_line = query.strip().splitlines()[0] if query.strip() else ""
        if isinstance(exc, UNREACHABLE):  # an outage: the stage pauses, nothing dead-lettered
            return StoreUnavailable(f"Neo4j at {self.uri} unreachable ({first_line} ...): {exc}")
        return StoreError(f"Neo4j at {self.uri} failed ({first_line} ...): {exc}")

"""Keeps the embedded FalkorDB's append-only file (AOF) replayable across restarts.

FalkorDB 4.16 logs each write either as its query (``GRAPH.QUERY``) or as its effects
(``GRAPH.EFFECT``), chosen per query by its time per change (``EFFECTS_THRESHOLD``, 300 µs
by default). Effects name nodes and edges by internal id, while a replayed query allocates
ids anew: during AOF loading no index is built yet, so an index-driven ``DELETE`` frees ids
in another order, later creations get other ids, and an effect then lands on the wrong
entity or on a free slot (SIGSEGV in ``AttributeSet_Update``; FalkorDB issue #2235).
memstream therefore logs every write as effects, folds the log into one snapshot at each
clean stop, and recovers a data dir whose old mixed log crashes the replay.
See docs/durability.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from memstream.local.falkordb_process import FalkorDBServerError

log = logging.getLogger(__name__)

# Module arguments: log every write as its effects, never as its query (0 = always effects).
EFFECTS_ONLY = ("EFFECTS_THRESHOLD", "0")
AOF_DIR = "appendonlydir"
RDB_FILE = "falkordb.rdb"
# The line the launcher writes into the server log before each start.
START_MARK = "--- memstream starts FalkorDB"
_READY = "Ready to accept connections"


def _client(port: int, timeout_s: float = 2.0) -> aioredis.Redis:
    return aioredis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0),
    )  # fmt: skip


async def _persistence(client: aioredis.Redis) -> dict[str, object]:
    info: dict[str, object] = await client.info("persistence")
    return info


async def _wait_rewrite(client: aioredis.Redis, timeout_s: float) -> bool:
    """Waits for a running or scheduled AOF rewrite to end; True when it succeeded."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await _persistence(client)
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return info.get("aof_last_bgrewrite_status") == "ok"
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def compact_aof(port: int, timeout_s: float) -> bool:
    """Rewrites the AOF as one snapshot when it holds writes since its last one.

    Done before a clean stop, so the next start loads a snapshot instead of replaying
    every write, and no log written by an older launcher (mixed queries and effects) is
    left to replay. False when it could not (the AOF stays valid as it was).
    """
    client = _client(port)
    try:
        info = await _persistence(client)
        if not info.get("aof_enabled"):
            return False
        if info.get("aof_current_size") == info.get("aof_base_size"):
            return True  # nothing written since the last snapshot
        await client.execute_command("BGREWRITEAOF")  # type: ignore[no-untyped-call]
        return await _wait_rewrite(client, timeout_s)
    except (RedisError, OSError) as exc:
        log.warning("FalkorDB: could not fold the append-only file before stopping: %s", exc)
        return False
    finally:
        await client.aclose()


async def enable_aof(port: int, timeout_s: float) -> None:
    """Turns the AOF on for a server started from its RDB snapshot, and waits for its base.

    Redis started with ``appendonly yes`` and no AOF directory starts *empty* (it writes an
    empty base and ignores the RDB), so a start from the snapshot runs without AOF first.
    """
    client = _client(port)
    try:
        await client.config_set("appendonly", "yes")
        if await _wait_rewrite(client, timeout_s):
            return
        problem = "it was not written in time"
    except (RedisError, OSError) as exc:
        problem = str(exc)
    finally:
        await client.aclose()
    raise FalkorDBServerError(
        f"FalkorDB started from its snapshot but could not write its append-only file: {problem}"
    )


def starts_from_rdb(data_dir: Path) -> bool:
    """No AOF yet but a snapshot: start from the snapshot (else redis would start empty)."""
    return not (data_dir / AOF_DIR).exists() and (data_dir / RDB_FILE).is_file()


def crashed_replaying(log_text: str) -> bool:
    """The log of one start shows the server crashing while it replayed its AOF."""
    crashed = "crashed by signal" in log_text or "ASSERTION FAILED" in log_text
    replaying = "loadAppendOnlyFile" in log_text or "on AOF loading" in log_text
    return crashed and replaying and _READY not in log_text


def rdb_holds_everything(data_dir: Path, log_path: Path) -> bool:
    """The snapshot holds every write the AOF holds, so starting from it loses nothing.

    True when the last run that served clients ended with its final save (a clean stop:
    redis stops taking writes, flushes the AOF, then saves the snapshot), every later start
    crashed before serving, and the snapshot is no older than the logged writes.
    """
    rdb = data_dir / RDB_FILE
    if not rdb.is_file():
        return False
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    runs = [run for run in text.split(START_MARK) if _READY in run]
    if not runs:
        return False
    last = runs[-1]
    saving = last.rfind("Saving the final RDB snapshot before exiting")
    if saving < 0:
        return False
    ended = last[saving:]
    if "DB saved on disk" not in ended or "ready to exit" not in ended:
        return False
    # The logged writes, not the manifest (redis rewrites that after the final save).
    logged = [p.stat().st_mtime for p in (data_dir / AOF_DIR).glob("*.incr.aof")]
    return not logged or rdb.stat().st_mtime >= max(logged)


def set_aside(data_dir: Path) -> Path:
    """Keeps the AOF that crashes the replay (never deletes it) and returns where it went."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = data_dir / f"{AOF_DIR}.crashed-{stamp}"
    (data_dir / AOF_DIR).rename(target)
    return target


def replay_crash_message(data_dir: Path) -> str:
    """One line: what happened, and what the user can do."""
    aof = data_dir / AOF_DIR
    return (
        f"FalkorDB crashes replaying its append-only file {aof} (a FalkorDB 4.16 bug with "
        f"logs an older memstream wrote; see docs/durability.md), and {data_dir / RDB_FILE} "
        f"may lack the writes after its last save: to start from that snapshot, move {aof} "
        "aside (e.g. to appendonlydir.crashed) and start again"
    )

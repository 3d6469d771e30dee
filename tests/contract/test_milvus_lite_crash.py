"""Milvus Lite keeps every acknowledged write through a SIGKILL, when two cubes write at once.

Milvus Lite appends each write to its write-ahead log without a lock: two cubes' batches
written at the same time tore the log, and after a kill it recovered 840 of 8,000
acknowledged rows. The adapter writes to a Lite file one call at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from memstream.sinks.vector.milvus import MilvusVectorStore

WRITER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from memstream.sinks.vector.milvus import MilvusVectorStore
    from memstream.sinks.ports import VectorRecord

    async def main(uri):
        store = MilvusVectorStore(uri, "crash", dim=8)
        await store.ensure_collection()

        async def cube(name):
            for batch in range(40):
                await store.upsert([VectorRecord(
                    id=f"{name}-{batch}-{i}", cube_id=name, user_id=name,
                    memory_type="LongTermMemory", status="activated",
                    vector=[float(batch), float(i), 1, 0, 0, 0, 0, 1]) for i in range(25)])
        await asyncio.gather(cube("ana"), cube("ben"), cube("eve"))
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(sys.argv[1]))
""")


async def test_acknowledged_writes_of_concurrent_cubes_survive_a_sigkill(tmp_path: Path) -> None:
    uri = str(tmp_path / "milvus.db")
    done = subprocess.run([sys.executable, "-c", WRITER, uri], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "acknowledged" in done.stdout, done.stderr[-2000:]
    store = MilvusVectorStore(uri, "crash", dim=8)
    await store.ensure_collection()
    try:
        for cube in ("ana", "ben", "eve"):
            ids = set(await store.list_ids(cube))
            assert len(ids) == 40 * 25, f"cube {cube}: {len(ids)} of 1000 acknowledged vectors"
    finally:
        await store.close()

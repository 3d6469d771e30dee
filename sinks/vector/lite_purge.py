"""Rewrite a Milvus Lite partition's files without its deleted rows, at once.

Milvus Lite 3.2 (pure Python, pinned) deletes by tombstone: a deleted row's fields, ``key``
and ``tags`` included, stay in the write-ahead log until the next flush and in the
partition's data files until a size-tiered compaction happens to pick them, which for a
small partition may be never. Erasure must not wait for that, and Lite's
``compact()`` is a no-op over its API, so this reaches the in-process engine that
``MilvusClient`` started for the file (``milvus_lite.server_manager``): flush (the old log
is deleted), then compact every data file of the partition (deleted rows dropped, old
files deleted), under the collection's own maintenance lock, as its background compaction
does. Private engine API: the erasure test (tests/e2e/test_erasure_on_disk.py) fails if a
new version changes it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


class PurgeUnavailable(RuntimeError):
    """The Milvus Lite engine of that file is not running in this process."""


def _collection(path: str, name: str) -> Any:
    from milvus_lite.server_manager import server_manager_instance

    servers: dict[str, tuple[Any, Any, int]] = server_manager_instance._servers  # noqa: SLF001
    entry = servers.get(os.path.abspath(path))
    if entry is None:
        raise PurgeUnavailable(f"no Milvus Lite engine runs in this process for {path}")
    return entry[1].get_collection(name)


def purge_partition(path: str, collection: str, partition: str) -> int:
    """Flush, then rewrite ``partition``'s data files without deleted rows; returns the
    number of files rewritten. Blocking: run it in a thread."""
    coll = _collection(path, collection)
    coll.flush()  # memtable to files; the write-ahead log holding the rows is deleted
    with coll._maintenance_lock:  # noqa: SLF001 - see the module docstring
        manifest = coll._manifest  # noqa: SLF001
        if partition not in manifest.list_partitions():
            return 0
        files = list(manifest.get_data_files(partition))
        if files:
            coll._compaction_mgr._compact_files(  # noqa: SLF001
                partition, os.path.join(coll._data_dir, "partitions", partition),  # noqa: SLF001
                files, manifest, coll._delta_index)  # noqa: SLF001
        coll._refresh_segment_cache()  # noqa: SLF001
        coll._cleanup_orphan_index_files()  # noqa: SLF001
    log.info("milvus lite: rewrote %d files of %s/%s without deleted rows", len(files),
             collection, partition)
    return len(files)

"""The Milvus collection layout of memstream and the VectorRecord <-> row mapping.

Rows are keyed by a digest of (cube id, node id): a node id reused in another cube
never overwrites this cube's vector, and the key is hex, so pymilvus's own id
lists (which it pastes into expressions unescaped) never carry user text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from pymilvus import DataType, MilvusClient

from memstream.sinks.ports import CubeRows, StoreError, VectorRecord
from memstream.sinks.vector.expr import to_micros

IndexType = Literal["FLAT", "AUTOINDEX", "HNSW", "IVF_FLAT"]
SCALAR_FIELDS = [
    "id",
    "cube_id",
    "user_id",
    "memory_type",
    "status",
    "key",
    "tags",
    "session_id",
    "hierarchy_level",
    "type",
    "updated_at",
]
REQUIRED_FIELDS = frozenset({"pk", "vector", "updated_ts", *SCALAR_FIELDS})
MAX_ID_BYTES = 1024
_INDEX_PARAMS: dict[str, dict[str, int]] = {
    "HNSW": {"M": 16, "efConstruction": 200},
    "IVF_FLAT": {"nlist": 128},
}


def row_key(cube_id: str, node_id: str) -> str:
    """The primary key of a node's row (cube ids hold no control characters)."""
    return hashlib.sha256(f"{cube_id}\x1f{node_id}".encode()).hexdigest()[:32]


def partition_name(cube_id: str) -> str:
    return "cube_" + hashlib.sha256(cube_id.encode()).hexdigest()[:24]


def search_params(index_type: IndexType, top_k: int) -> dict[str, Any]:
    params: dict[str, Any] = {"metric_type": "COSINE"}
    if index_type == "HNSW":
        params["params"] = {"ef": max(64, top_k)}
    elif index_type == "IVF_FLAT":
        params["params"] = {"nprobe": 16}
    return params


def build_schema(dim: int, partition_key: bool, index_type: IndexType) -> tuple[Any, Any]:
    """(schema, index params) of a memstream collection; cosine metric on ``vector``."""
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("id", DataType.VARCHAR, max_length=MAX_ID_BYTES)
    schema.add_field(
        "cube_id", DataType.VARCHAR, max_length=MAX_ID_BYTES, is_partition_key=partition_key
    )
    for name in ("user_id", "session_id"):
        schema.add_field(name, DataType.VARCHAR, max_length=MAX_ID_BYTES)
    for name in ("memory_type", "status", "hierarchy_level", "type"):
        schema.add_field(name, DataType.VARCHAR, max_length=32)
    schema.add_field("key", DataType.VARCHAR, max_length=65535)
    schema.add_field(
        "tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=1024, max_length=1024
    )
    schema.add_field("updated_at", DataType.VARCHAR, max_length=64)
    schema.add_field("updated_ts", DataType.INT64)  # epoch microseconds, for range filters
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    index = MilvusClient.prepare_index_params()
    index.add_index(
        "vector",
        index_type=index_type,
        metric_type="COSINE",
        params=_INDEX_PARAMS.get(index_type, {}),
    )
    return schema, index


def to_row(record: VectorRecord, dim: int) -> dict[str, Any]:
    """Validate a record and map it to a row; a missing session is stored as ``""``."""
    vec = np.asarray(record.vector, dtype=np.float32)
    if vec.shape != (dim,):
        raise StoreError(f"vector of {record.id!r} has shape {vec.shape}, expected ({dim},)")
    if not np.isfinite(vec).all() or not vec.any():
        raise StoreError(f"vector of {record.id!r} is zero or not finite")
    for name in ("id", "user_id", "session_id"):
        value = getattr(record, name) or ""
        if len(value.encode()) > MAX_ID_BYTES:
            raise StoreError(f"{name} longer than {MAX_ID_BYTES} bytes: {value[:40]!r}...")
    return {
        "pk": row_key(record.cube_id, record.id),
        "id": record.id,
        "cube_id": record.cube_id,
        "user_id": record.user_id,
        "memory_type": record.memory_type,
        "status": record.status,
        "key": record.key,
        "tags": list(record.tags),
        "session_id": record.session_id or "",
        "hierarchy_level": record.hierarchy_level,
        "type": record.type,
        "updated_at": record.updated_at,
        "updated_ts": to_micros(record.updated_at),
        "vector": vec.tolist(),
    }


def from_row(row: dict[str, Any]) -> VectorRecord:
    return VectorRecord(
        id=row["id"],
        cube_id=row["cube_id"],
        user_id=row["user_id"],
        memory_type=row["memory_type"],
        status=row["status"],
        vector=[float(x) for x in row.get("vector") or ()],
        key=row["key"],
        tags=tuple(row["tags"] or ()),
        session_id=row["session_id"] or None,
        hierarchy_level=row["hierarchy_level"],
        type=row["type"],
        updated_at=row["updated_at"],
    )


def split_rows(page: Iterable[dict[str, Any]], dim: int) -> CubeRows:
    """Rows read with ``strict_float32`` (each vector a float32 array) as records without
    their vectors and one matrix of the vectors, in the same order. pymilvus makes each
    row a dict only when it is read: call this off the event loop."""
    rows = list(page)
    vectors = [row.pop("vector") for row in rows]
    if not vectors:
        return CubeRows.empty(dim)
    matrix = np.stack(vectors).astype(np.float32, copy=False)
    return CubeRows([from_row(row) for row in rows], matrix)

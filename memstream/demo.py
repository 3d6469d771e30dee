"""``memstream demo``: the whole pipeline on the embedded default, start to finish.

Starts a broker, FalkorDB and a worker in a fresh data dir, publishes a sample
conversation (an English and a Chinese session), waits until every chunk is
extracted and stored, prints the memories, and stops everything.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.padding import Padding
from rich.table import Table

from memstream.client.client import MemoryClient
from memstream.local.stack import EmbeddedStack
from memstream.samples import DEMO_USER, sample_sessions
from memstream.streams.worker import Worker
from memstream.topics.events import WriteToken
from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings


async def _publish(client: MemoryClient, start: datetime) -> list[WriteToken]:
    tokens = []
    for session, messages in sample_sessions(start).items():
        tokens.append(await client.add_messages(DEMO_USER, messages, session_id=session))
    return tokens


def _table(items: Sequence[MemoryItem]) -> Table:
    table = Table(title=f"Memories of cube '{DEMO_USER}'", show_lines=False)
    for col in ("type", "key", "memory", "tags"):
        table.add_column(col, overflow="fold")
    for item in items:
        md = item.metadata
        table.add_row(md.memory_type, md.key, item.memory, ", ".join(md.tags))
    return table


async def _search_and_refresh(client: MemoryClient, console: Console) -> None:
    """A search over request/reply, then the scheduler refreshing working memory."""
    query = "What should I avoid eating?"
    hits = await client.search(DEMO_USER, query, top_k=3, memory_type="UserMemory")
    console.print(f"\n[bold]search[/] {query!r}:")
    for hit in hits:
        console.print(f"  {hit.score:.3f}  {hit.item.memory}")

    question = "What should I cook tonight?"
    updates = client.updates(cube_id=DEMO_USER)
    first = asyncio.ensure_future(anext(updates))
    await asyncio.sleep(0.5)  # the follower is positioned before the query is sent
    await client.schedule(DEMO_USER, "query", question)
    console.print(f"\n[bold]scheduler[/] the user asks {question!r}; working memory refresh:")
    try:
        async with asyncio.timeout(30):
            while (await first).action != "working_memory_replaced":
                first = asyncio.ensure_future(anext(updates))
    except TimeoutError:
        console.print("  (no refresh: working memory already covered the question)")
    else:
        # an episode is several lines: each under the first, not at the margin
        listing = Table.grid(padding=(0, 1))
        listing.add_column(justify="right")
        listing.add_column()
        for i, item in enumerate(await client.working_memory(DEMO_USER), 1):
            listing.add_row(f"{i}.", item.memory)
        console.print(Padding(listing, (0, 0, 0, 2)), highlight=False)
    finally:
        first.cancel()
        await updates.aclose()


async def run_demo(settings: Settings | None = None, console: Console | None = None) -> int:
    console = console or Console()
    with tempfile.TemporaryDirectory(prefix="memstream-demo-") as tmp:
        settings = settings or Settings(data_dir=Path(tmp))
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        t0 = time.monotonic()
        async with EmbeddedStack(settings) as stack:
            console.print(f"[green]✓[/] broker at {stack.bootstrap}, FalkorDB at {stack.graph_uri}")
            with console.status("Starting the worker (loading the embedding model)…"):
                worker = Worker(settings, stack.bootstrap, stack.graph_uri)
                await worker.start()
            try:
                assert worker.deps is not None  # noqa: S101
                console.print(f"[green]✓[/] worker running — LLM: [bold]{worker.deps.llm.name}"
                              f"[/], embedder: [bold]{worker.deps.embedder.name}[/]")
                async with MemoryClient(settings, stack.bootstrap) as client:
                    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
                    tokens = await _publish(client, start)
                    console.print(f"[green]✓[/] published {len(tokens)} conversation chunks "
                                  "(English and Chinese sessions)")
                    with console.status("Extracting and storing memories…") as status:
                        for i, token in enumerate(tokens, 1):
                            await client.wait_applied(token, timeout=120)
                            status.update(f"Extracting and storing memories… {i}/{len(tokens)}")
                    items = []
                    for memory_type in ("UserMemory", "LongTermMemory"):
                        items += await worker.deps.query.all_of_type(DEMO_USER, memory_type)
                    console.print(_table(sorted(items, key=lambda i: i.metadata.created_at)))
                    counts = await worker.deps.query.count_by_type(DEMO_USER)
                    console.print(
                        f"{len(items)} memories stored; also {counts.get('EpisodicMemory', 0)} "
                        f"episodes (the chunks as said) and {counts.get('WorkingMemory', 0)} "
                        "working-memory entries")
                    await _search_and_refresh(client, console)
            finally:
                with console.status("Stopping…"):
                    await worker.stop()
        console.print(f"[green]✓[/] done in {time.monotonic() - t0:.1f}s")
    return 0


def main() -> int:
    return asyncio.run(run_demo())

"""The embedded stack (noida-db broker, FalkorDB) a bench runs on, started in a temporary
data directory that is removed afterwards.

    async with embedded_stack() as (data, stack):
        settings = make_settings(data, "run", stack.bootstrap, stack.graph_uri)
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstream.local.stack import EmbeddedStack  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402


@asynccontextmanager
async def embedded_stack(prefix: str = "memstream-bench-",
                         parent: str | None = None) -> AsyncIterator[tuple[Path, EmbeddedStack]]:
    """The data directory (named ``prefix``…, under ``parent`` or the system's temporary
    directory) and the stack started in it."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as tmp:
        data = Path(tmp)
        async with EmbeddedStack(Settings(data_dir=data)) as stack:
            yield data, stack

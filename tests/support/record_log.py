"""Record the log-v1 fixture: run the live pipeline on the embedded stack over two cubes
(chat chunks, direct adds, a merge, an update and a delete), then write its records and
what the stores held (``tests/support/log_fixture.py``).

    python -m tests.support.record_log tests/fixtures/log-v1
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from memstream.local.stack import EmbeddedStack
from memstream.sinks.dump import export_cube
from memstream.topics.settings import Settings
from tests.e2e.test_replay import feed, settle
from tests.support import log_fixture
from tests.support.pipeline import pipeline_settings, run_pipeline

CUBES = (("ines", "Ines"), ("tomas", "Tomas"))


async def record(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="ms-record-log-") as tmp:
        data = Path(tmp)
        async with EmbeddedStack(Settings(data_dir=data / "stack")) as stack:
            settings = pipeline_settings(data / "pipe", stack.bootstrap, stack.graph_uri,
                                         reorganize={"optimize_interval_s": 3600},
                                         erasure={"enabled": True})
            async for p in run_pipeline(settings):
                for cube, name in CUBES:
                    await feed(p, cube, name)
                for cube, _ in CUBES:
                    await settle(p, cube)
                views = {cube: log_fixture.store_view(await export_cube(p.deps.store, cube))
                         for cube, _ in CUBES}
                records = await log_fixture.read_topics(settings, stack.bootstrap)
                log_fixture.write(out, records, views, settings.erasure_key_dir,
                                  settings.kafka.partitions)
                print(f"{len(records)} records, "
                      f"{sum(len(v['nodes']) for v in views.values())} nodes -> {out}")


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1])))

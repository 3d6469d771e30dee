"""Run the ``memstream`` command line as a user does (a separate process) against a test's
pipeline, without blocking the event loop the in-process worker runs on."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.pipeline import Pipeline

MEMSTREAM = [sys.executable, "-m", "memstream"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def clean_env(columns: int = 200) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env["COLUMNS"] = str(columns)  # rich tables as wide as a terminal of that many columns
    return env


def pipeline_env(p: Pipeline, columns: int = 200) -> dict[str, str]:
    """The environment a user would set to reach this pipeline's broker, topics and graph."""
    s = p.settings
    assert s.graph.uri is not None
    return {**clean_env(columns),
            "MEMSTREAM_DATA_DIR": str(s.data_dir),
            "MEMSTREAM_APP_ID": s.app_id,
            "MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS": p.bootstrap,
            "MEMSTREAM_KAFKA__TOPIC_PREFIX": s.kafka.topic_prefix,
            "MEMSTREAM_KAFKA__PARTITIONS": str(s.kafka.partitions),
            "MEMSTREAM_GRAPH__URI": s.graph.uri,
            "MEMSTREAM_GRAPH__DATABASE": s.graph.database}


async def run_cli(env: dict[str, str], *args: str, cwd: Path | None = None,
                  stdin: str | None = None, timeout: float = 180) -> Result:
    proc = await asyncio.create_subprocess_exec(
        *MEMSTREAM, *args, cwd=cwd, env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())

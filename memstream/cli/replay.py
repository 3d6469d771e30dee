"""``memstream replay`` / ``promote`` / ``drop-views``: rebuild views from the log, switch them.

The worker owns the stores (Milvus Lite is one process per file), so these commands
publish a ``memory.commands`` event and follow its progress on ``memory.updates``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memstream.cli.common import apply_command, console, data_dir_option, run_async, settings_for
from memstream.cli.errors import InputError
from memstream.client.client import MemoryClient
from memstream.kafka.compat import cancel_within
from memstream.topics.events import DropViews, PromoteCube, ReplayCube
from memstream.topics.settings import Settings

REPLAY_TIMEOUT_S = 24 * 3600.0


def parse_from(value: str | None) -> dict[str, Any]:
    """``--from``: an offset (digits) or an ISO 8601 time (UTC when no zone is given)."""
    if value is None:
        return {}
    if value.isdigit():
        return {"from_offset": int(value)}
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither an offset nor an ISO 8601 time "
                                 "(e.g. 2026-11-24T10:00:00Z)", param_hint="--from") from None
    return {"from_time": at if at.tzinfo else at.replace(tzinfo=UTC)}


cube_option = click.option("--cube", "cube_id", required=True, help="The memory cube.")
user_option = click.option("--user", "user_id", default=None,
                           help="The user the cube belongs to (default: the cube id).")


@click.command()
@cube_option
@user_option
@click.option("--from", "start", default=None, metavar="TIME|OFFSET",
              help="Apply again from this memory.items offset or ISO time, over the current "
                   "views (default: drop the views and rebuild them from the whole log).")
@click.option("--shadow", default=None, metavar="NAME",
              help="Re-extract the cube's conversations into the cube NAME instead.")
@click.option("--model", "llm_model", default=None, help="The shadow's chat model.")
@click.option("--llm-base-url", default=None, help="The shadow's OpenAI-compatible endpoint.")
@data_dir_option
def replay(cube_id: str, user_id: str | None, start: str | None, shadow: str | None,
           llm_model: str | None, llm_base_url: str | None, data_dir: Path | None) -> None:
    """Rebuild a cube's graph, vectors and working memory from the retained log."""
    if (llm_model or llm_base_url) and not shadow:
        raise click.UsageError("--model and --llm-base-url need --shadow NAME")
    settings = settings_for(data_dir)
    if llm_model and not llm_base_url and settings.llm.provider != "openai":
        # the worker would build the rules stand-in, which has no models: say so, not ignore it
        raise InputError(f"--model {llm_model}: no OpenAI-compatible endpoint is configured "
                         "(give --llm-base-url URL or set MEMSTREAM_LLM__BASE_URL); the "
                         "'rules' stand-in has no models — nothing was published")
    cmd = ReplayCube(user_id=user_id or cube_id, cube_id=cube_id, shadow=shadow,
                     llm_model=llm_model, llm_base_url=llm_base_url, **parse_from(start))
    run_async(_replay(settings, cmd))


async def _replay(settings: Settings, cmd: ReplayCube) -> None:
    into = f" into shadow cube '{cmd.shadow}'" if cmd.shadow else ""
    async with MemoryClient(settings) as client:
        progress = Progress(TextColumn(f"replaying '{cmd.cube_id}'{into}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("records"), TimeElapsedColumn(),
                            console=console)
        task = progress.add_task("replay", total=None)
        final = ""

        async def follow() -> None:
            nonlocal final
            from memstream.streams.replay.logic import progress_of

            async for update in client.updates(cube_id=cmd.cube_id):
                if update.action != "replayed" or update.cause_event_id != cmd.event_id:
                    continue
                if (done := progress_of(update)) is not None:
                    progress.update(task, completed=done[0], total=done[1])
                final = update.reason

        with progress:
            follower = asyncio.create_task(follow())
            await asyncio.sleep(0.2)  # the follower is at the end of the topic first
            try:
                token = await client.command(cmd)
                await client.wait_applied(token, timeout=REPLAY_TIMEOUT_S)
                await asyncio.sleep(0.3)  # the last progress update
            finally:
                # the follower reads through an aiokafka consumer, whose close can swallow a
                # cancel: cancelled until it ends, within a limit
                await cancel_within(follower, "replay progress reader")
        failure = await client.command_failure(token)
    if failure is not None:
        raise RuntimeError(f"replay failed: {failure}")
    console.print(f"replayed {final.removesuffix(' (done)')}" if final else "replay done")


@click.command()
@cube_option
@user_option
@click.option("--view", required=True, metavar="NAME",
              help="The cube whose views answer reads of --cube from now on (--cube itself "
                   "switches back).")
@data_dir_option
def promote(cube_id: str, user_id: str | None, view: str, data_dir: Path | None) -> None:
    """Switch readers of a cube to another cube's views (e.g. a shadow replay), at once."""
    cmd = PromoteCube(user_id=user_id or cube_id, cube_id=cube_id, view=view)
    run_async(apply_command(settings_for(data_dir), cmd, "promote", "waiting for the worker …"))
    console.print(f"reads of '{cube_id}' now go to '{view}'")


@click.command("drop-views")
@cube_option
@user_option
@data_dir_option
def drop_views(cube_id: str, user_id: str | None, data_dir: Path | None) -> None:
    """Drop a cube's graph nodes and vectors; its log stays, so `replay` rebuilds them."""
    cmd = DropViews(user_id=user_id or cube_id, cube_id=cube_id)
    run_async(apply_command(settings_for(data_dir), cmd, "drop views", "waiting for the worker …"))
    console.print(f"dropped the views of '{cube_id}'")

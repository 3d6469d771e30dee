"""What every ``memstream`` command shares: the common options, settings from the data
directory, and running a coroutine or a worker command with one-line failures.

Command modules import from here; ``memstream.cli`` imports them all and adds their commands
to the group, so nothing imports back up and the package has no cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console

from memstream.cli.errors import InputError, not_empty, run, validation_line
from memstream.client.client import MemoryClient
from memstream.topics.events import Event
from memstream.topics.settings import Settings

console = Console()


def settings_for(data_dir: Path | None) -> Settings:
    """Settings from the environment, with the data directory found from here (an explicit
    ``--data-dir`` or ``MEMSTREAM_DATA_DIR``, else the nearest ``.memstream`` upwards)."""
    from memstream.local.datadir import with_data_dir

    try:
        settings = Settings()
    except ValidationError as exc:
        raise InputError(validation_line(exc, "settings (MEMSTREAM_* variables)")) from None
    if data_dir is not None:
        return settings.model_copy(update={"data_dir": data_dir.expanduser().resolve()})
    return with_data_dir(settings)


def run_async(coro: Any) -> Any:
    """Run a command's coroutine; a failure is one line, never a traceback."""
    return run(coro)


def print_json(data: Any) -> None:
    """Machine-readable output of a read command (``--json``)."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


async def apply_command(settings: Settings, event: Event, what: str,
                        waiting: str | None = None) -> None:
    """Publish a ``memory.commands`` event, wait until the worker applied it, and fail with
    the worker's reason when it refused (``what`` names the command in that line)."""
    async with MemoryClient(settings) as client:
        token = await client.command(event)
        with console.status(waiting or f"waiting for the worker to {what} …"):
            await client.wait_applied(token, timeout=600)
        failure = await client.command_failure(token)
    if failure is not None:
        raise click.ClickException(failure if failure.startswith(what)
                                   else f"{what} refused: {failure}")


data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path), default=None,
    help="Where embedded services keep their data (default ./.memstream or MEMSTREAM_DATA_DIR).",
)
user_option = click.option("--user", "user_id", default="default-user", show_default=True,
                           callback=not_empty, help="The user the memories belong to.")
cube_option = click.option("--cube", "cube_id", default=None, callback=not_empty,
                           help="The memory cube (default: the user id).")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON instead of a table.")


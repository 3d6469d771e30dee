"""``memstream share`` and ``unshare``: a cube's owner lets another user read it (or also
write it), or stops; a search can then read that cube with the user's own (``--cube A
--cube B``)."""

from __future__ import annotations

from pathlib import Path

import click

from memstream.cli.common import apply_command, console, data_dir_option, run_async, settings_for
from memstream.cli.errors import not_empty
from memstream.topics.events import ShareCube, UnshareCube

owner_option = click.option("--user", "user_id", required=True, callback=not_empty,
                            help="The cube's owner (only the owner may share it).")


@click.command()
@click.argument("cube_id", metavar="CUBE", callback=not_empty)
@owner_option
@click.option("--with", "with_user", required=True, callback=not_empty, metavar="USER",
              help="The user who may read it from now on.")
@click.option("--write", is_flag=True, help="Also let that user write it.")
@data_dir_option
def share(cube_id: str, user_id: str, with_user: str, write: bool, data_dir: Path | None) -> None:
    """Let another user read CUBE (or also write it, --write)."""
    event = ShareCube(user_id=user_id, cube_id=cube_id, with_user_id=with_user,
                      permission="write" if write else "read")
    run_async(apply_command(settings_for(data_dir), event, "share"))
    console.print(f"cube '{cube_id}' shared with {with_user} "
                  f"({'read and write' if write else 'read'})")


@click.command()
@click.argument("cube_id", metavar="CUBE", callback=not_empty)
@owner_option
@click.option("--with", "with_user", required=True, callback=not_empty, metavar="USER",
              help="The user who may no longer read it.")
@data_dir_option
def unshare(cube_id: str, user_id: str, with_user: str, data_dir: Path | None) -> None:
    """Stop sharing CUBE with a user."""
    event = UnshareCube(user_id=user_id, cube_id=cube_id, with_user_id=with_user)
    run_async(apply_command(settings_for(data_dir), event, "unshare"))
    console.print(f"cube '{cube_id}' no longer shared with {with_user}")

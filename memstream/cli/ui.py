"""``memstream ui``: serve the page that browses a cube (memstream/ui)."""

from __future__ import annotations

from pathlib import Path

import click

from memstream.cli.common import (
    console,
    cube_option,
    data_dir_option,
    run_async,
    settings_for,
    user_option,
)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@user_option
@cube_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; the page has no login, so anything but loopback "
                   "exposes the cube to the network.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@data_dir_option
def ui(user_id: str, cube_id: str | None, host: str, port: int, data_dir: Path | None) -> None:
    """Serve a page to browse a cube: topic → concept → fact tree, edges, history, search."""
    from memstream.ui.server import serve

    if host not in LOOPBACK:
        console.print(f"[yellow]warning:[/] serving on {host}: anyone who reaches it can read "
                      "this cube")

    def ready(url: str) -> None:
        console.print(f"memstream ui for cube '{cube_id or user_id}' at {url} (Ctrl-C to stop)")

    run_async(serve(settings_for(data_dir), user_id, cube_id or user_id, host, port, ready))
    console.print("stopped")

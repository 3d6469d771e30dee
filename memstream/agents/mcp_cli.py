"""``memstream mcp``: serve one user's memory to MCP clients (Claude Desktop, IDE agents).

Registered on the ``memstream`` group by one line in the CLI; the SDK is imported only when
the command runs, so the rest of the CLI works without the ``mcp`` extra.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from memstream.local.datadir import with_data_dir
from memstream.topics.settings import Settings

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _id(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if any(isinstance(v, str) and not v.strip()
           for v in (value if isinstance(value, tuple) else (value,))):
        raise click.BadParameter("must not be empty")
    return value


@click.command("mcp")
@click.option("--user", "user_id", required=True, callback=_id,
              help="The user whose memory this server serves (fixed: tools cannot change it).")
@click.option("--cube", "cube_id", default=None, callback=_id,
              help="The memory cube (default: the user id).")
@click.option("--read-cube", "read_cubes", multiple=True, callback=_id, metavar="CUBE",
              help="One more cube its searches read with --cube, as one ranking (repeat for "
                   "several; the user must be allowed to read it). Writes go to --cube.")
@click.option("--http", "http_port", type=click.IntRange(1, 65535), default=None,
              metavar="PORT", help="Serve streamable HTTP on PORT (at /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind with --http. The server has no authentication: keep it "
                   "on loopback unless a proxy in front of it checks who calls.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="WARNING", show_default=True, help="Logs go to stderr.")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="The data directory of the stack `memstream up` runs (default: the "
                   "nearest .memstream upwards, or MEMSTREAM_DATA_DIR).")
def mcp(user_id: str, cube_id: str | None, read_cubes: tuple[str, ...], http_port: int | None,
        host: str, log_level: str, data_dir: Path | None) -> None:
    """Serve USER's memory over the Model Context Protocol (stdio, or HTTP with --http).

    Tools: search, add a memory or a chat turn, get, list, update, delete, history and
    explain; resources: the working memory and the activation block. Reaches the stack
    `memstream up` runs (found from here as other commands find it) or the configured
    MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS.
    """
    try:
        from memstream.agents.mcp_server import serve
    except ImportError as exc:
        raise click.ClickException(
            f"memstream mcp needs the MCP SDK ({exc.name} is missing): "
            "pip install 'memstream[mcp]'") from None
    from memstream.agents.memory_tools import Identity
    from memstream.client.client import ClientError

    level = log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "mcp", "uvicorn", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        settings = Settings()
        identity = Identity(user_id=user_id, cube_id=cube_id or user_id,
                            read_cubes=tuple(read_cubes))
    except ValidationError as exc:
        raise click.ClickException(f"settings: {exc.errors()[0]['msg']}") from None
    settings = settings.model_copy(update={"data_dir": data_dir.expanduser().resolve()}) \
        if data_dir is not None else with_data_dir(settings)

    def ready(where: str) -> None:
        also = "".join(f", reading '{c}'" for c in identity.read_cubes)
        click.echo(f"memstream MCP server for user '{identity.user_id}', cube "
                   f"'{identity.cube_id}'{also} on {where}", err=True)

    try:
        asyncio.run(serve(settings, identity, http_port, host, level,  # type: ignore[arg-type]
                          on_ready=ready))
    except KeyboardInterrupt:
        pass
    except ClientError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None

"""The ``memstream`` command line: the group and the one list of its commands.

Every module beside this one defines plain click commands and registers nothing; this file
alone adds them to ``main``, so it names every command and the module it lives in.
"""

import click

from memstream import __version__
from memstream.agents.mcp_cli import mcp
from memstream.cli.erase import erase
from memstream.cli.log import as_of, explain, freeze, history, restore, sweep, unfreeze
from memstream.cli.memories import add, context, dump, load, search
from memstream.cli.nodes import backup, dead_letters, delete, feedback, get, list_, update
from memstream.cli.replay import drop_views, promote, replay
from memstream.cli.share import share, unshare
from memstream.cli.stack import demo, down, status, up, worker
from memstream.cli.ui import ui


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="memstream")
def main() -> None:
    """memstream: long-term memory for LLM agents, as a Kafka event-streaming pipeline.

    Configure with MEMSTREAM_* environment variables (nested with "__", e.g.
    MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS). With nothing configured, everything runs
    embedded on this machine: `memstream up`, then `add`, `search`, and `down`.
    """


COMMANDS: tuple[click.Command, ...] = (
    # memories in and out (memories.py)
    add, search, context, dump, load,
    # single memories and the operator's queues (nodes.py)
    get, list_, update, feedback, delete, dead_letters, backup,
    # a cube shared with another user, or no longer (share.py)
    share, unshare,
    # a user's cubes erased everywhere, then checked (erase.py)
    erase,
    # the log and a memory's lifecycle (log.py)
    history, as_of, explain, freeze, unfreeze, sweep, restore,
    # views rebuilt from the log and switched (replay.py)
    replay, promote, drop_views,
    # the embedded stack (stack.py)
    demo, worker, up, down, status,
    # the page (ui.py); MCP, whose SDK is imported only when it runs (memstream/agents/mcp_cli.py)
    ui, mcp,
)
"""Every ``memstream`` command, grouped by module (``--help`` lists them by name)."""

for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["COMMANDS", "main"]

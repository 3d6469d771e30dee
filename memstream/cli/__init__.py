"""The ``memstream`` command line: one group (``common.main``) and a module per family of
commands, each registering on it when imported here."""

from memstream.agents.mcp_cli import mcp
from memstream.cli import memories as _memories  # noqa: F401 - add, search, dump, load
from memstream.cli import nodes as _nodes  # noqa: F401 - get, list, update, delete, backup, …
from memstream.cli import stack as _stack  # noqa: F401 - demo, worker, up, down, status
from memstream.cli import ui as _ui  # noqa: F401 - ui
from memstream.cli.common import main
from memstream.cli.log import add_log_commands
from memstream.cli.replay import COMMANDS

main.add_command(mcp)  # memstream mcp (docs/agents.md)
add_log_commands(main)  # history, as-of, explain, freeze, unfreeze, sweep, restore
for _command in COMMANDS:  # replay, promote, drop-views
    main.add_command(_command)

__all__ = ["main"]

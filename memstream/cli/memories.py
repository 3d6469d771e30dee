"""The ``memstream`` commands that move memories in and out: add, search, context, dump, load."""

from __future__ import annotations

from pathlib import Path

import click

from memstream.cli.common import (
    console,
    cube_option,
    data_dir_option,
    json_option,
    run_async,
    settings_for,
    user_option,
)
from memstream.cli.errors import not_empty
from memstream.topics.context import DEFAULT_BUDGET, Unit
from memstream.topics.events import MAX_TOP_K

# search and context: one cube, or several as one ranking
cubes_option = click.option(
    "--cube", "cube_ids", multiple=True, callback=not_empty,
    help="The memory cube (default: the user id); repeat it to read several as one: one "
         "ranking over them all.")


@click.command()
@click.argument("file", required=False, type=click.Path(allow_dash=True, dir_okay=False,
                                                        path_type=Path))
@user_option
@cube_option
@click.option("--text", "text", default=None, callback=not_empty,
              help="Add this text as one user message (instead of FILE).")
@click.option("--doc", "as_doc", is_flag=True,
              help="FILE (or stdin) is a document: plain text, chunked by extraction.")
@click.option("--session", "session_id", default=None, callback=not_empty,
              help="Session id for the messages.")
@click.option("--chunk-size", default=6, show_default=True, type=click.IntRange(1, 100),
              help="Messages per published chunk.")
@click.option("--no-wait", is_flag=True, help="Return once published, without waiting.")
@data_dir_option
def add(file: Path | None, user_id: str, cube_id: str | None, text: str | None, as_doc: bool,
        session_id: str | None, chunk_size: int, no_wait: bool, data_dir: Path | None) -> None:
    """Add a conversation from a JSON FILE of messages, a document, or text.

    FILE holds a list of messages ({"role", "content", optional "timestamp" and "id"}), or
    {"session_id", "messages": [...]}, or a list of such sessions. A FILE that is not JSON
    (or --doc) is added as a document; --text adds one user message, and so does "-"
    (stdin) unless stdin holds JSON messages or --doc is given.
    Messages without an id get one derived from their content, so adding the same file
    twice adds nothing. Everything is checked against the limits before anything is sent.
    """
    from memstream.cli.actions import add_input

    if (file is None) == (text is None):
        raise click.UsageError("give one of FILE, - (stdin) or --text")
    run_async(add_input(settings_for(data_dir), console, file, text, as_doc, user_id, cube_id,
                   session_id, chunk_size, not no_wait))


@click.command()
@click.argument("query", callback=not_empty)
@user_option
@cubes_option
@click.option("--top-k", default=10, show_default=True, type=click.IntRange(1, MAX_TOP_K))
@click.option("--mode", type=click.Choice(["fast", "fine"]), default="fast", show_default=True)
@click.option("--type", "memory_type", default="All", show_default=True,
              type=click.Choice(["All", "WorkingMemory", "LongTermMemory", "UserMemory",
                                 "EpisodicMemory"]))
@click.option("--session", "session_id", default=None, callback=not_empty,
              help="Only memories of this session.")
@click.option("--filter", "filter_json", default=None, metavar="JSON",
              help='Metadata filter, e.g. \'{"tags": {"contains": "food"}}\'.')
@click.option("--min-score", default=0.0, show_default=True, type=click.FloatRange(0, 1),
              help="Leave out hits scoring below this (scores are in 0..1).")
@json_option
@data_dir_option
def search(query: str, user_id: str, cube_ids: tuple[str, ...], top_k: int, mode: str,
           memory_type: str, session_id: str | None, filter_json: str | None, min_score: float,
           as_json: bool, data_dir: Path | None) -> None:
    """Search a cube's memories (or several cubes' as one) and print them as a table (id,
    date, score, memory)."""
    from memstream.cli.actions import parse_filter, search_table

    search_filter = parse_filter(filter_json, session_id)
    run_async(search_table(settings_for(data_dir), console, query, user_id, cube_ids, top_k,
                           mode, memory_type, search_filter, as_json, min_score))


@click.command()
@click.argument("query", callback=not_empty)
@user_option
@cubes_option
@click.option("--budget", type=click.IntRange(1), default=None, metavar="N",
              help="At most N characters (default 2000).")
@click.option("--tokens", type=click.IntRange(1), default=None, metavar="N",
              help="At most N tokens, as estimated (instead of --budget).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the text, the ids, each entry, what did not fit.")
@data_dir_option
def context(query: str, user_id: str, cube_ids: tuple[str, ...], budget: int | None,
            tokens: int | None, as_json: bool, data_dir: Path | None) -> None:
    """Print what a cube remembers about QUERY as a block for a prompt: the best hits first,
    each with its id, date and speakers, within a budget; the last line says how many more
    did not fit."""
    from memstream.cli.actions import context_block

    if budget is not None and tokens is not None:
        raise click.UsageError("give --budget or --tokens, not both")
    unit: Unit = "chars" if tokens is None else "tokens"
    run_async(context_block(settings_for(data_dir), query, user_id, cube_ids,
                            tokens or budget or DEFAULT_BUDGET, unit, as_json))


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@user_option
@cube_option
@data_dir_option
def dump(path: Path, user_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Write a cube (nodes, edges, vectors) to a JSON file at PATH (done by the worker)."""
    from memstream.cli.actions import dump_or_load

    run_async(dump_or_load(settings_for(data_dir), console, "dump", path, user_id, cube_id))


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@user_option
@cube_option
@data_dir_option
def load(path: Path, user_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Load a cube dumped with `memstream dump` into --cube (default: the --user id)."""
    from memstream.cli.actions import dump_or_load

    run_async(dump_or_load(settings_for(data_dir), console, "load", path, user_id, cube_id))



"""The ``memstream`` command line."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from memstream import __version__
from memstream.cli_errors import InputError, not_empty, run, validation_line
from memstream.cli_log import add_log_commands
from memstream.cli_replay import COMMANDS
from memstream.topics.events import MAX_TOP_K
from memstream.topics.settings import Settings

console = Console()


def _settings(data_dir: Path | None) -> Settings:
    """Settings from the environment, with the data directory found from here (an explicit
    ``--data-dir`` or ``MEMSTREAM_DATA_DIR``, else the nearest ``.memstream`` upwards)."""
    from memstream.topics.datadir import with_data_dir

    try:
        settings = Settings()
    except ValidationError as exc:
        raise InputError(validation_line(exc, "settings (MEMSTREAM_* variables)")) from None
    if data_dir is not None:
        return settings.model_copy(update={"data_dir": data_dir.expanduser().resolve()})
    return with_data_dir(settings)


def _logging(level: str) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt)
    # faust and aiokafka are chatty at INFO; keep their warnings.
    for noisy in ("faust", "aiokafka", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


def _run(coro: Any) -> Any:
    return run(coro)


def _print_json(data: Any) -> None:
    """Machine-readable output of a read command (``--json``)."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="memstream")
def main() -> None:
    """memstream: long-term memory for LLM agents, as a Kafka event-streaming pipeline.

    Configure with MEMSTREAM_* environment variables (nested with "__", e.g.
    MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS). With nothing configured, everything runs
    embedded on this machine: `memstream up`, then `add`, `search`, and `down`.
    """


@main.command()
def demo() -> None:
    """Run the whole pipeline once on the embedded default and print the memories."""
    from memstream.demo import main as demo_main

    raise SystemExit(demo_main())


@main.command()
@data_dir_option
@click.option("--log-level", default="INFO", show_default=True)
def worker(data_dir: Path | None, log_level: str) -> None:
    """Run a worker in the foreground until Ctrl-C / SIGTERM.

    Uses the configured broker and graph, else the ones `memstream up` started, else
    starts embedded ones for the lifetime of this worker.
    """
    _logging(log_level)
    _run(_worker(_settings(data_dir)))


async def _worker(settings: Settings) -> None:
    from memstream.services import remove_worker_file, write_worker_file
    from memstream.stack import EmbeddedStack
    from memstream.streams.worker import Worker

    stop = asyncio.Event()
    started = False
    main_task = asyncio.current_task()

    def on_signal() -> None:
        # Once consuming, stop cleanly; while starting (joining the group, loading the
        # model), give up the start: a worker must never ignore SIGTERM.
        if started or main_task is None:
            stop.set()
        else:
            main_task.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    write_worker_file(settings.data_dir, state="starting")
    try:
        async with EmbeddedStack(settings) as stack, \
                Worker(settings, stack.bootstrap, stack.graph_uri) as running:
            write_worker_file(settings.data_dir, stack.bootstrap, stack.graph_uri,
                              metrics=running.metrics_url)
            started = True
            click.echo(f"memstream worker running (kafka {stack.bootstrap}, graph "
                       f"{stack.graph_uri}); Ctrl-C to stop", err=True)
            await stop.wait()
    except asyncio.CancelledError:
        click.echo("worker stopped while starting", err=True)
        return
    finally:
        remove_worker_file(settings.data_dir)
    click.echo("worker stopped", err=True)


@main.command()
@data_dir_option
def up(data_dir: Path | None) -> None:
    """Start the embedded broker, FalkorDB and a worker in the background."""
    settings = _settings(data_dir)
    console.print(f"data directory {settings.data_dir}")
    _run(_up(settings))


async def _up(settings: Settings) -> None:
    from memstream.services import running_worker, spawn_worker, stop_worker, wait_for_worker
    from memstream.stack import EmbeddedStack

    killed: list[int] = []

    async def before_broker_start() -> None:
        # The embedded broker loses what it acknowledged in its last unsaved second,
        # committed offsets included. A worker still running from before remembers positions
        # past what the broker kept: once the broker is back it would commit them (a clean
        # stop does), and the records the broker lost and takes again at those offsets would
        # never be handled. So it goes first, without a clean stop, and a new worker resumes
        # from the offsets the broker kept (stages are idempotent).
        if (info := running_worker(settings.data_dir)) is not None:
            killed.append(int(str(info["pid"])))
            await stop_worker(settings.data_dir, timeout_s=0)

    with console.status("Starting the broker and FalkorDB…"):
        stack = EmbeddedStack(settings, before_broker_start=before_broker_start)
        await stack.start(detached=True)
    console.print(f"[green]✓[/] kafka {stack.bootstrap}, graph {stack.graph_uri}")
    if killed:
        console.print(f"the broker was restarted: stopped worker pid {killed[0]} before it, so "
                      "a new worker resumes from the offsets the broker kept")
    if (info := running_worker(settings.data_dir)) is not None:
        pid = int(str(info["pid"]))
        if info.get("state") == "starting":
            with console.status(f"Waiting for the worker (pid {pid}) to start…"):
                ready = await wait_for_worker(settings.data_dir, pid)
            if ready:
                console.print(f"[green]✓[/] worker running (pid {pid})")
                return
            console.print(f"worker pid {pid} did not finish starting; restarting it")
            await stop_worker(settings.data_dir)
        elif (info.get("bootstrap"), info.get("graph")) != (stack.bootstrap, stack.graph_uri):
            console.print(f"worker pid {pid} uses {info.get('bootstrap')} and "
                          f"{info.get('graph')}; restarting it on the new addresses")
            await stop_worker(settings.data_dir)
        else:
            console.print(f"[green]✓[/] worker already running (pid {pid})")
            return
    with console.status("Starting the worker (loading the embedding model)…"):
        pid = await spawn_worker(settings.data_dir)
    console.print(f"[green]✓[/] worker running (pid {pid}); logs in "
                  f"{settings.data_dir / 'worker.log'}")


@main.command()
@data_dir_option
def down(data_dir: Path | None) -> None:
    """Stop what `memstream up` started (data is kept)."""
    from memstream.services import down as stop_all

    settings = _settings(data_dir)
    stopped = _run(stop_all(settings.data_dir))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else
                  f"nothing was running (data directory {settings.data_dir})")


@main.command()
@data_dir_option
@json_option
def status(data_dir: Path | None, as_json: bool) -> None:
    """Show which embedded services run, and the workers' lag per topic."""
    _run(_status(_settings(data_dir), as_json))


async def _status(settings: Settings, as_json: bool = False) -> None:
    from memstream.services import status as service_status
    from memstream.topics.admin import worker_lag

    st = await service_status(settings.data_dir)
    bootstrap = settings.kafka.bootstrap_servers or st.broker
    if as_json:
        lag = await worker_lag(settings, bootstrap) if bootstrap else {}
        _print_json({"data_dir": str(settings.data_dir), "broker": bootstrap,
                     "graph": settings.graph.uri or st.graph, "worker_pid": st.worker_pid,
                     "notes": st.notes,
                     "lag": {t: sum(p.values()) for t, p in sorted(lag.items()) if p}})
        return
    def missing(what: str) -> str:
        note = st.notes.get(what)
        return f"[red]not running[/] ({note})" if note else "[red]not running[/]"

    table = Table(show_header=False)
    table.add_row("data", str(settings.data_dir))
    table.add_row("broker", bootstrap or missing("broker"))
    table.add_row("graph", settings.graph.uri or st.graph or missing("graph"))
    worker = f"pid {st.worker_pid}" if st.worker_pid else missing("worker")
    if st.worker_pid and "worker" in st.notes:
        worker += f" ({st.notes['worker']})"
    table.add_row("worker", worker)
    console.print(table)
    if bootstrap:
        lag = await worker_lag(settings, bootstrap)
        rows = [(t, sum(p.values())) for t, p in sorted(lag.items()) if p]
        if rows:
            lag_table = Table("topic", "lag (records not yet processed)")
            for topic, total in rows:
                lag_table.add_row(topic, str(total))
            console.print(lag_table)
    from memstream.services import recorded_worker
    from memstream.topics.metrics_summary import summary_table

    if st.worker_pid and (info := recorded_worker(settings.data_dir)) and info.get("metrics"):
        console.print(await summary_table(str(info["metrics"])))


@main.command()
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
    (or --doc) is added as a document; "-" reads stdin; --text adds one user message.
    Messages without an id get one derived from their content, so adding the same file
    twice adds nothing. Everything is checked against the limits before anything is sent.
    """
    from memstream.cli_actions import add_input

    if (file is None) == (text is None):
        raise click.UsageError("give one of FILE, - (stdin) or --text")
    _run(add_input(_settings(data_dir), console, file, text, as_doc, user_id, cube_id,
                   session_id, chunk_size, not no_wait))


@main.command()
@click.argument("query", callback=not_empty)
@user_option
@cube_option
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
def search(query: str, user_id: str, cube_id: str | None, top_k: int, mode: str,
           memory_type: str, session_id: str | None, filter_json: str | None, min_score: float,
           as_json: bool, data_dir: Path | None) -> None:
    """Search a cube's memories and print them as a table (id, date, score, memory)."""
    from memstream.cli_actions import parse_filter, search_table

    search_filter = parse_filter(filter_json, session_id)
    _run(search_table(_settings(data_dir), console, query, user_id, cube_id, top_k, mode,
                      memory_type, search_filter, as_json, min_score))


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@user_option
@cube_option
@data_dir_option
def dump(path: Path, user_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Write a cube (nodes, edges, vectors) to a JSON file at PATH (done by the worker)."""
    from memstream.cli_actions import dump_or_load

    _run(dump_or_load(_settings(data_dir), console, "dump", path, user_id, cube_id))


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@user_option
@cube_option
@data_dir_option
def load(path: Path, user_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Load a cube dumped with `memstream dump` into --cube (default: the --user id)."""
    from memstream.cli_actions import dump_or_load

    _run(dump_or_load(_settings(data_dir), console, "load", path, user_id, cube_id))


add_log_commands(main)  # history, as-of, explain, freeze, unfreeze, sweep, restore
# Commands in modules of their own register on `main` when imported (one line each).
# isort: off
from memstream import cli_nodes  # noqa: E402,F401 - get, list, update, delete, dead-letters, …
from memstream import cli_ui  # noqa: E402,F401 - memstream ui
# isort: on
for _command in COMMANDS:  # replay, promote, drop-views (memstream/cli_replay.py)
    main.add_command(_command)

if __name__ == "__main__":
    main()

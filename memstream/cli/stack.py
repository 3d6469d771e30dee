"""The ``memstream`` commands that run the embedded stack: demo, worker, up, down, status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from memstream.cli.common import (
    console,
    data_dir_option,
    json_option,
    print_json,
    run_async,
    settings_for,
)
from memstream.topics.settings import Settings

if TYPE_CHECKING:
    from memstream.local.stack import EmbeddedStack


def _logging(level: str) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt)
    # faust and aiokafka are chatty at INFO; keep their warnings.
    for noisy in ("faust", "aiokafka", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


@click.command()
def demo() -> None:
    """Run the whole pipeline once on the embedded default and print the memories."""
    from memstream.demo import main as demo_main

    raise SystemExit(demo_main())


@click.command()
@data_dir_option
@click.option("--log-level", default="INFO", show_default=True)
def worker(data_dir: Path | None, log_level: str) -> None:
    """Run a worker in the foreground until Ctrl-C / SIGTERM.

    Uses the configured broker and graph, else the ones `memstream up` started, else
    starts embedded ones for the lifetime of this worker.
    """
    _logging(log_level)
    run_async(_worker(settings_for(data_dir)))


async def _worker(settings: Settings) -> None:
    from memstream.local.services import remove_worker_file, write_worker_file
    from memstream.local.stack import EmbeddedStack
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
        async with EmbeddedStack(settings, wait_graph=False) as stack, \
                Worker(settings, stack.bootstrap, stack.graph_uri,
                       graph_ready=stack.graph_ready) as running:
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


@click.command()
@data_dir_option
def up(data_dir: Path | None) -> None:
    """Start the embedded broker, FalkorDB and a worker in the background."""
    settings = settings_for(data_dir)
    console.print(f"data directory {settings.data_dir}")
    run_async(_up(settings))


async def _up(settings: Settings) -> None:
    from memstream.local.services import running_worker, stop_worker
    from memstream.local.stack import EmbeddedStack, until_launched

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

    stack = EmbeddedStack(settings, before_broker_start=before_broker_start)
    starting = asyncio.create_task(stack.start(detached=True))
    with console.status("Starting the broker and FalkorDB…"):
        await until_launched(starting, stack.launched)  # one that could not start says why
    if killed:
        console.print(f"the broker was restarted: stopped worker pid {killed[0]} before it, so "
                      "a new worker resumes from the offsets the broker kept")
    # FalkorDB loads its graph now (a while for a long history): the worker starts
    # meanwhile, loading its model and vector store, and waits for the graph itself.
    worker = asyncio.create_task(_worker_for(settings, stack))
    try:
        with console.status("Loading the graph, starting the worker…"):
            await starting
        console.print(f"[green]✓[/] kafka {stack.bootstrap}, graph {stack.graph_uri}")
        from memstream.local.log_report import after_start

        for line in await after_start(settings, stack.bootstrap, stack.restored):
            console.print(f"[red]{line}[/]", highlight=False)
        with console.status("Starting the worker (loading the embedding model and vectors)…"):
            pid, message = await worker
    except BaseException:
        worker.cancel()  # a worker spawned for a stack that did not start goes too
        with contextlib.suppress(BaseException):
            await worker
        raise
    console.print(message)


async def _worker_for(settings: Settings, stack: EmbeddedStack) -> tuple[int, str]:
    """The data dir's worker for ``stack``: the one running if it uses the same addresses,
    else a new one; returns its pid once it consumes, and what to tell the user."""
    from memstream.local.services import running_worker, spawn_worker, stop_worker, wait_for_worker

    graph_uri = stack.graph_uri
    if (info := running_worker(settings.data_dir)) is not None:
        pid = int(str(info["pid"]))
        if info.get("state") == "starting":
            if await wait_for_worker(settings.data_dir, pid):
                return pid, f"[green]✓[/] worker running (pid {pid})"
            console.print(f"worker pid {pid} did not finish starting; restarting it")
            await stop_worker(settings.data_dir)
        elif (info.get("bootstrap"), info.get("graph")) != (stack.bootstrap, graph_uri):
            console.print(f"worker pid {pid} uses {info.get('bootstrap')} and "
                          f"{info.get('graph')}; restarting it on the new addresses")
            await stop_worker(settings.data_dir)
        else:
            return pid, f"[green]✓[/] worker already running (pid {pid})"
    try:
        pid = await spawn_worker(settings.data_dir)
    except RuntimeError:
        # FalkorDB came up on another port than the one it was launched on (taken
        # meanwhile): the worker waited for the first one. Once more on the new one.
        if await stack.graph_ready() == graph_uri:
            raise
        pid = await spawn_worker(settings.data_dir)
    return pid, (f"[green]✓[/] worker running (pid {pid}); logs in "
                 f"{settings.data_dir / 'worker.log'}")


@click.command()
@data_dir_option
def down(data_dir: Path | None) -> None:
    """Stop what `memstream up` started (data is kept)."""
    from memstream.local.services import down as stop_all

    settings = settings_for(data_dir)
    stopped = run_async(stop_all(settings.data_dir))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else
                  f"nothing was running (data directory {settings.data_dir})")


@click.command()
@data_dir_option
@json_option
def status(data_dir: Path | None, as_json: bool) -> None:
    """Show which embedded services run, and the workers' lag per topic."""
    run_async(_status(settings_for(data_dir), as_json))


async def _status(settings: Settings, as_json: bool = False) -> None:
    from memstream.archive.segments import Archive
    from memstream.cli.worker_metrics import (
        lag_table,
        stalled_partitions,
        summary_json,
        summary_table,
    )
    from memstream.kafka.admin import worker_lag
    from memstream.local.log_report import status_lines, status_report
    from memstream.local.services import recorded_worker
    from memstream.local.services import status as service_status

    st = await service_status(settings.data_dir)
    bootstrap = settings.kafka.bootstrap_servers or st.broker
    metrics_url = None
    if st.worker_pid and (info := recorded_worker(settings.data_dir)) and info.get("metrics"):
        metrics_url = str(info["metrics"])
    if as_json:
        lag = await worker_lag(settings, bootstrap) if bootstrap else {}
        print_json({"data_dir": str(settings.data_dir), "broker": bootstrap,
                     "graph": settings.graph.uri or st.graph, "worker_pid": st.worker_pid,
                     "notes": st.notes, "log": await status_report(settings, bootstrap),
                     "archive": Archive(settings.data_dir).summary(),
                     "lag": {t: sum(p.values()) for t, p in sorted(lag.items()) if p},
                     "metrics": await summary_json(metrics_url) if metrics_url else None})
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
    log_lines = status_lines(await status_report(settings, bootstrap))
    table.add_row("log", log_lines[0])
    table.add_row("archive", Archive(settings.data_dir).describe())
    console.print(table)
    for line in log_lines[1:]:
        console.print(line, highlight=False)
    if bootstrap:
        stalls = await stalled_partitions(metrics_url) if metrics_url else []
        if (lags := lag_table(await worker_lag(settings, bootstrap), stalls)) is not None:
            console.print(lags)
    if metrics_url:
        console.print(await summary_table(metrics_url))



"""The ``memstream`` command line."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import click

from topics.settings import Settings


def _settings(data_dir: Path | None) -> Settings:
    settings = Settings()
    if data_dir is not None:
        settings = settings.model_copy(update={"data_dir": data_dir})
    return settings


def _logging(level: str) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt)
    # faust and aiokafka are chatty at INFO; keep their warnings.
    for noisy in ("faust", "aiokafka", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path), default=None,
    help="Where embedded services keep their data (default ./.memstream, or MEMSTREAM_DATA_DIR).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """memstream: long-term memory for LLM agents, as a Kafka event-streaming pipeline.

    Configure with MEMSTREAM_* environment variables (nested with "__", e.g.
    MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS). With nothing configured, everything runs
    embedded on this machine.
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
    asyncio.run(_run_worker(_settings(data_dir)))


async def _run_worker(settings: Settings) -> None:
    from memstream.stack import EmbeddedStack
    from streams.worker import Worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with EmbeddedStack(settings) as stack, Worker(settings, stack.bootstrap, stack.graph_uri):
        click.echo(f"memstream worker running (kafka {stack.bootstrap}, graph {stack.graph_uri}); "
                   "Ctrl-C to stop", err=True)
        await stop.wait()
    click.echo("worker stopped", err=True)


if __name__ == "__main__":
    main()

"""Fixtures shared by every test folder: one broker, one FalkorDB (and a Milvus server when
asked for) per session."""

import asyncio
import concurrent.futures.thread as futures_thread
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType

import pytest

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.stream.broker_fixtures",
    "tests.support.pipeline",
    "tests.support.milvus_fixtures",
]


# --- a run that ends, ends ---------------------------------------------------------------
# A thread a test left running (an in-process worker's consumer thread retrying a broker
# that is gone) keeps the interpreter from exiting after the summary: CI once waited on
# one until its time limit. The run ends with pytest's own status, naming those threads.

_status: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _status["exit"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if "exit" not in _status:
        return
    # (an executor's idle threads end at exit by themselves: its atexit hook wakes them)
    left = [t for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive() and not t.daemon
            and getattr(t, "_target", None) is not futures_thread._worker]
    if not left:
        return
    frames = sys._current_frames()
    print(f"\n{len(left)} non-daemon thread(s) still running after the tests; exiting "
          "without waiting for them:", file=sys.stderr)
    for t in left:
        print(f"--- {t.name}", file=sys.stderr)
        if (frame := frames.get(t.ident or -1)) is not None:
            print("".join(traceback.format_stack(frame)[-6:]), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status["exit"])


# --- a stuck test shows what it awaits ---------------------------------------------------
# pytest-timeout's thread method dumps the threads' stacks, but a test stuck in an await
# shows only the event loop idle in select. A few seconds before that limit the main thread
# gets SIGUSR1 and prints every asyncio task's stack (also by hand: kill -USR1 <pid>).

def _print_tasks(signum: int, frame: FrameType | None) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        print("\n(no event loop running in the main thread)", file=sys.stderr)
        return
    tasks = asyncio.all_tasks(loop)
    print(f"\n{len(tasks)} asyncio task(s) pending:", file=sys.stderr)
    for task in tasks:
        print(f"--- {task.get_name()}: {task.get_coro()!r}", file=sys.stderr)
        task.print_stack(limit=8, file=sys.stderr)
    sys.stderr.flush()


if hasattr(signal, "SIGUSR1"):
    signal.signal(signal.SIGUSR1, _print_tasks)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0] if marker and marker.args else item.config.getini("timeout") or 0)
    timer = None
    if limit > 10 and hasattr(signal, "SIGUSR1"):
        timer = threading.Timer(limit - 5, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()

"""Fixtures shared by every test folder: one broker, one FalkorDB (and a Milvus server when
asked for) per session."""

import asyncio
import concurrent.futures.thread as futures_thread
import contextlib
import os
import signal
import sys
import threading
import time
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


# --- test tiers ------------------------------------------------------------------------
# The quick tier (``pytest -m quick``) is the inner loop: pure logic and the store contract
# suite on the embedded and in-memory stores. The real Milvus server's branch (40 s to start)
# and everything needing a broker or a whole pipeline run in the full suite only.
QUICK_FOLDERS = ("unit", "contract")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.nodeid.split("/")
        if len(parts) < 2 or parts[0] != "tests" or parts[1] not in QUICK_FOLDERS:
            continue
        if "milvus-server" in item.nodeid or any("milvus_server" in f for f in item.fixturenames):
            continue
        item.add_marker(pytest.mark.quick)


def _print_stack(thread: str, stack: list[str], last: int) -> None:
    print(f"--- thread {thread}", file=sys.stderr)
    print("".join(stack[-last:]), end="", file=sys.stderr)


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
        if (frame := frames.get(t.ident or -1)) is not None:
            _print_stack(t.name, traceback.format_stack(frame), 6)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status["exit"])


# --- a stuck test says which it is and what it awaits ------------------------------------
# pytest-timeout's thread method prints the captured output and then every thread's stack,
# and a CI log that keeps only its tail loses the rest; it never names the test, and a test
# stuck in an await shows only the event loop idle in select. So a few seconds before that
# limit this watchdog ends the run itself, printing the busy threads' stacks, then every
# asyncio task's stack (the main thread prints them on SIGUSR1: also by hand, kill -USR1
# <pid>), and last the stuck test's id and phase.

# a thread waiting for work shows one of these at the top of its stack
_IDLE = ("work_queue.get", "completion_queue.poll", "self._selector.select",
         "waiter.acquire", "selector.poll")


def _await_chain(coro: object) -> list[str]:
    """Where a task waits, outermost first, down to what it awaits last. Unlike
    ``Task.print_stack`` this goes into an async generator driven by ``__anext__`` (an async
    fixture's teardown), whose frames the task's own stack does not reach."""
    lines: list[str] = []
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen and len(lines) < 40:
        seen.add(id(coro))
        frame = next((f for a in ("cr_frame", "gi_frame", "ag_frame")
                      if (f := getattr(coro, a, None)) is not None), None)
        if frame is None:
            lines.append(f"  awaiting {coro!r}")
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        nxt = next((n for a in ("cr_await", "gi_yieldfrom", "ag_await")
                    if (n := getattr(coro, a, None)) is not None), None)
        if nxt is not None and not hasattr(nxt, "cr_frame") and not hasattr(nxt, "gi_frame"):
            # an async generator's __anext__: follow the generator it drives, if suspended
            nxt = next((v for v in frame.f_locals.values()
                        if getattr(v, "ag_await", None) is not None), nxt)
        coro = nxt
    return lines


def _print_tasks(signum: int, frame: FrameType | None) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        print("\n(no event loop running in the main thread)", file=sys.stderr)
        return
    tasks = asyncio.all_tasks(loop)
    print(f"\n{len(tasks)} asyncio task(s) pending:", file=sys.stderr)
    for task in tasks:
        print(f"--- {task!r:.400}", file=sys.stderr)
        print("\n".join(_await_chain(task.get_coro())), file=sys.stderr)
    sys.stderr.flush()


if hasattr(signal, "SIGUSR1"):
    signal.signal(signal.SIGUSR1, _print_tasks)


def _busy_threads() -> None:
    names = {t.ident: t.name for t in threading.enumerate()}
    idle = 0
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        stack = traceback.format_stack(frame)
        if stack and any(mark in stack[-1] for mark in _IDLE):
            idle += 1
            continue
        _print_stack(names.get(ident, str(ident)), stack, 12)
    print(f"({idle} more thread(s) idle, waiting for work)", file=sys.stderr)


def _stuck(config: pytest.Config, limit: float) -> None:
    capman = config.pluginmanager.getplugin("capturemanager")
    with contextlib.suppress(Exception):
        capman.suspend_global_capture(in_=True)
    test = os.environ.get("PYTEST_CURRENT_TEST", "?")  # "<test id> (<phase>)"
    print(f"\n+++ stuck for {limit:.0f}s: {test}; the busy threads:", file=sys.stderr)
    _busy_threads()
    if hasattr(signal, "SIGUSR1"):
        os.kill(os.getpid(), signal.SIGUSR1)  # the main thread prints its tasks, if it can
        time.sleep(3)
    print(f"\n+++ stuck for {limit:.0f}s, ending the run: {test}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0] if marker and marker.args else item.config.getini("timeout") or 0)
    timer = None
    if limit > 10:
        timer = threading.Timer(limit - 5, _stuck, (item.config, limit - 5))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


"""Fixtures shared by every test folder: one broker, one FalkorDB (and a Milvus server when
asked for) per session."""

import concurrent.futures.thread as futures_thread
import os
import sys
import threading
import traceback

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

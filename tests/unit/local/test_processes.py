"""`pid_alive`, which `memstream status` and `up` ask of each service's recorded pid."""

from __future__ import annotations

import subprocess
import sys
import time

from memstream.local.processes import pid_alive
from tests.support.processes import zombie as is_zombie


def test_a_running_process_is_alive_and_our_exited_child_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert pid_alive(child.pid)
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while pid_alive(child.pid):  # reaps it: no zombie of ours is left behind
        assert time.monotonic() < deadline, "a killed child still counted as running"
        time.sleep(0.01)


def test_a_zombie_whose_parent_never_reaps_it_is_not_alive() -> None:
    """A killed service whose parent does not reap it (a container whose first process is no
    init) stays a zombie: it answers nothing and holds no port, so it does not run."""
    # sh starts a short-lived child, prints its pid, then becomes a process that never
    # waits for it: the child stays a zombie of a parent that is not us. The child outlives
    # the exec (a child that ended first could be reaped by sh itself, and never be a zombie).
    parent = subprocess.Popen(["sh", "-c", "sleep 0.5 & echo $!; exec sleep 30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while sys.platform.startswith("linux") and not is_zombie(zombie):
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        if not sys.platform.startswith("linux"):
            time.sleep(0.5)
        # told from /proc on Linux; elsewhere a zombie cannot be told from a live process
        assert pid_alive(zombie) is not sys.platform.startswith("linux")
        assert pid_alive(parent.pid)  # its parent runs (sleep)
    finally:
        parent.kill()
        parent.wait()

"""Whether a test's process runs: a process that has exited but is not reaped yet (a zombie;
here the first process reaps orphans late) does not."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (Linux's /proc; elsewhere False)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not (sys.platform.startswith("linux") and zombie(pid))

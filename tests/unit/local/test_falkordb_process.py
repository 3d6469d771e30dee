"""`LoadWatch`: how the launcher tells a FalkorDB still loading a large graph (it answers
nothing while it builds its indexes) from one that hangs, before giving up on it."""

from __future__ import annotations

import subprocess
import sys
import time

from memstream.local.falkordb_process import LoadWatch
from memstream.local.processes import free_port


async def _watched(code: str) -> tuple[bool, bool]:
    """Two looks, 1.5 s apart, at a child running ``code`` (nothing listens on the port)."""
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)  # past the interpreter's own start
        watch = LoadWatch(child.pid)
        time.sleep(1.5)
        first = await watch.working(free_port())
        time.sleep(1.5)
        return first, await watch.working(free_port())
    finally:
        child.kill()
        child.wait()


async def test_a_server_that_uses_cpu_is_loading_and_one_that_idles_is_not() -> None:
    assert await _watched("while True: pass") == (True, True)
    assert await _watched("import time; time.sleep(60)") == (False, False)

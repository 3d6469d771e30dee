"""One real Milvus standalone server (the ``milvus`` package) per test session.

Started only when a test asks for ``milvus_server_uri`` (the ``milvus-server`` vector
backend, the multi-worker e2e test). It gets free loopback ports and its own data dir; if
it cannot start, every test that needs it fails with the tails of its logs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from memstream.local.milvus_server import MilvusServer, MilvusServerError

# Ready in ~5 s on an idle machine, ~40 s on a busy one.
MILVUS_START_TIMEOUT_S = 180.0
# A loaded server often hangs in its own shutdown (retrying its stopped root coordinator);
# its data is temporary, so it gets 10 s before SIGKILL.
MILVUS_STOP_TIMEOUT_S = 10.0


@pytest.fixture(scope="session")
def milvus_server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a Milvus 2.3 standalone shared by the session.

    Isolate tests by collection name, never by restarting. Teardown stops the launcher and
    its ``milvus run standalone`` child (SIGTERM, then SIGKILL) and removes the unpacked
    binaries (~250 MB).
    """
    data_dir = tmp_path_factory.mktemp("milvus-server")
    server = MilvusServer(
        data_dir, startup_timeout_s=MILVUS_START_TIMEOUT_S, stop_timeout_s=MILVUS_STOP_TIMEOUT_S
    )
    try:
        uri = server.start()
    except MilvusServerError as exc:
        shutil.rmtree(data_dir / "bin", ignore_errors=True)
        pytest.fail(f"could not start the Milvus server for the tests: {exc}", pytrace=False)
    try:
        yield uri
    finally:
        server.stop()
        shutil.rmtree(data_dir / "bin", ignore_errors=True)

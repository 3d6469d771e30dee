"""Identities that cannot be claimed (issue 26): with application keys configured, a worker
refuses what is unsigned, forged, expired or signed for another application's cube, names
the reason (never the key) and stores nothing of it; two keys of one application are valid
at once while it rotates. Real broker, FalkorDB, Milvus Lite and an in-process worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.security.signing import HEADER, Signer
from memstream.topics.events import Event, ExtractedMemory, ReplayCube, WriteToken
from memstream.topics.models import utcnow
from memstream.topics.registry import MEMORY_ITEMS, TopicSpec
from memstream.topics.settings import Settings
from memstream.topics.trust import SecuritySettings, SigningKey
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

SECRETS = {name: f"{name}-secret-of-at-least-thirty-two-characters" for name in
           ("workers", "chat-old", "chat-new", "notes", "wrong")}


def key(key_id: str, secret: str) -> dict[str, str]:
    return {"id": key_id, "secret": SECRETS[secret]}


# The workers' view: every application's keys; chat is rotating from key c1 to key c2.
APPLICATIONS = {
    "memstream": {"keys": [key("w1", "workers")], "cubes": ["*"]},
    "chat": {"keys": [key("c2", "chat-new"), key("c1", "chat-old")], "cubes": ["chat-*"]},
    "notes": {"keys": [key("n1", "notes")], "cubes": ["notes-*"]},
}


def as_application(settings: Settings, app: str | None, *keys: dict[str, str]) -> Settings:
    """A client's settings: only its own application's keys (``app`` None: no keys)."""
    security = SecuritySettings() if app is None else SecuritySettings(
        applications={app: {"keys": list(keys), "cubes": APPLICATIONS[app]["cubes"]}},
        application=app)
    return settings.model_copy(update={"security": security})


@pytest_asyncio.fixture
async def signed(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                 ) -> AsyncIterator[Pipeline]:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri, security={
        "applications": APPLICATIONS, "application": "memstream"})
    async for p in run_pipeline(settings):
        yield p


async def publish_with(pipeline: Pipeline, spec: TopicSpec, event: Event,
                       headers: list[tuple[str, bytes]]) -> WriteToken:
    """Publish ``event`` with exactly ``headers``: what a hostile producer can do."""
    producer = AIOKafkaProducer(bootstrap_servers=pipeline.bootstrap, acks="all")
    await producer.start()
    try:
        value = spec.encode(event)
        meta = await producer.send_and_wait(spec.name(pipeline.settings), value,
                                            key=event.kafka_key, headers=headers)
    finally:
        await producer.stop()
    return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)


def signed_by(signer: Signer, spec: TopicSpec, event: Event) -> list[tuple[str, bytes]]:
    return [signer.sign(event.user_id, event.cube_id, spec.encode(event))]


async def stored(pipeline: Pipeline, cube_id: str) -> int:
    counts = await pipeline.deps.query.count_by_type(cube_id, status=None)
    return sum(counts.values())


async def refused_with(client: MemoryClient, token: WriteToken) -> str:
    await client.wait_applied(token, timeout=60)
    error = await client.command_failure(token)
    assert error is not None, f"the event at {token} was accepted"
    return error


def no_secret_in(text: str) -> None:
    for secret in SECRETS.values():
        assert secret not in text


async def test_refused_events_name_the_reason_and_store_nothing(signed: Pipeline) -> None:
    base = signed.settings
    async with MemoryClient(as_application(base, "chat", key("c2", "chat-new")),
                            signed.bootstrap) as chat:
        # the signed path works end to end: extraction's own items are signed by the workers
        token = await chat.add_messages("alice", [
            {"role": "user", "content": "I keep my bike in the shed behind the bakery."}],
            cube_id="chat-alice")
        await chat.wait_applied(token, timeout=60)
        assert await stored(signed, "chat-alice") > 0
        found = await chat.search("alice", "where is the bike?", cube_id="chat-alice")
        assert any("bike" in s.item.memory for s in found)

        item = ExtractedMemory(user_id="mallory", cube_id="chat-mallory",
                               memory="Mallory owns the bakery.")
        clock_an_hour_ago: Callable[[], datetime] = lambda: utcnow() - timedelta(hours=1)  # noqa: E731
        cases: dict[str, tuple[WriteToken, str]] = {}

        # a forged signature: the right application and key id, a key that is not chat's
        forger = Signer("chat", SigningKey(**key("c2", "wrong")), 300)
        cases["forged"] = (await publish_with(signed, MEMORY_ITEMS, item,
                                              signed_by(forger, MEMORY_ITEMS, item)),
                           "does not match this event's user 'mallory', cube 'chat-mallory'")
        # a real signature lifted onto another event (user and content changed)
        genuine = Signer("chat", SigningKey(**key("c2", "chat-new")), 300)
        lifted = signed_by(genuine, MEMORY_ITEMS, item.model_copy(update={"user_id": "alice"}))
        cases["lifted"] = (await publish_with(signed, MEMORY_ITEMS, item, lifted),
                           "forged, or altered after signing")
        # an expired one: signed an hour before it was written, with a 300 s life
        stale = Signer("chat", SigningKey(**key("c2", "chat-new")), 300, clock_an_hour_ago)
        cases["expired"] = (await publish_with(signed, MEMORY_ITEMS, item,
                                               signed_by(stale, MEMORY_ITEMS, item)),
                            "signature expired at")
        # an unsigned event, while keys are configured
        async with MemoryClient(as_application(base, None), signed.bootstrap) as anonymous:
            cases["unsigned"] = (await anonymous.add_memories("mallory", [item.memory],
                                                              cube_id="chat-mallory"),
                                 "unsigned event")
            with pytest.raises(MemoryServiceError, match="unsigned event"):
                await anonymous.search("alice", "bike", cube_id="chat-alice")
        # a valid signature of notes for a cube of chat
        async with MemoryClient(as_application(base, "notes", key("n1", "notes")),
                                signed.bootstrap) as notes:
            cases["other application's cube"] = (
                await notes.add_memories("mallory", [item.memory], cube_id="chat-mallory"),
                "application 'notes' may not sign for cube 'chat-mallory' (its cubes: notes-*); "
                "it belongs to application 'chat'")
            with pytest.raises(MemoryServiceError, match="may not sign for cube 'chat-alice'"):
                await notes.search("alice", "bike", cube_id="chat-alice")
            # a notes cube of its own is fine
            token = await notes.add_memories("bob", ["Bob's notebook is blue."],
                                             cube_id="notes-bob")
            await notes.wait_applied(token, timeout=60)
            assert await stored(signed, "notes-bob") > 0

        for case, (token, reason) in cases.items():
            error = await refused_with(chat, token)
            assert reason in error, f"{case}: {error}"
            no_secret_in(error)
        assert await stored(signed, "chat-mallory") == 0  # nothing of any of them

        # a conversation refused before extraction: nothing extracted from it either
        async with MemoryClient(as_application(base, None), signed.bootstrap) as anonymous:
            token = await anonymous.add_messages("mallory", [
                {"role": "user", "content": "I am the owner of this bakery."}],
                cube_id="chat-mallory2")
        assert "unsigned event" in await refused_with(chat, token)
        assert await stored(signed, "chat-mallory2") == 0
        # re-driven by the chat backend, the event is vouched for by chat's key, and goes in
        letter = next(x for x in await chat.history("dead-letter")
                      if (x.original_topic, x.original_offset) == (token.topic, token.offset))
        again = await chat.redrive(letter)
        await chat.wait_applied(again, timeout=60)
        assert await chat.command_failure(again) is None
        assert await stored(signed, "chat-mallory2") > 0

    # every dead letter is one of the refusals above: the workers' own events all passed
    letters = [letter async for letter in _letters(signed)]
    assert letters and all(letter.error_type == "SignatureRefused" for letter in letters), \
        [(x.stage, x.error) for x in letters]
    for letter in letters:
        no_secret_in(letter.error)


async def _letters(pipeline: Pipeline) -> AsyncIterator[Any]:
    for letter in await pipeline.client.history("dead-letter"):
        yield letter


async def test_two_keys_are_valid_while_one_application_rotates(signed: Pipeline) -> None:
    base = signed.settings
    old = as_application(base, "chat", key("c1", "chat-old"))
    new = as_application(base, "chat", key("c2", "chat-new"))
    async with MemoryClient(old, signed.bootstrap) as before, \
            MemoryClient(new, signed.bootstrap) as after:
        first = await before.add_memories("alice", ["Alice's locker code is 4711."],
                                          cube_id="chat-rotating")
        second = await after.add_memories("alice", ["Alice parks on level three."],
                                          cube_id="chat-rotating")
        for client, token in ((before, first), (after, second)):
            await client.wait_applied(token, timeout=60)
            assert await client.command_failure(token) is None
        texts = {s.item.memory for c in (before, after)
                 for s in await c.search("alice", "locker code and parking",
                                         cube_id="chat-rotating", memory_type="LongTermMemory")}
        assert {"Alice's locker code is 4711.", "Alice parks on level three."} <= texts
    # the signature names its key, so each worker knows which key to check
    header = Signer.of(new.security).sign("alice", "chat-rotating", b"{}")  # type: ignore[union-attr]
    assert header[0] == HEADER and b";chat;c2;" in header[1]


async def test_a_replay_skips_what_was_refused_when_it_was_written(signed: Pipeline) -> None:
    """The log keeps refused records; rebuilding a cube from it must not let them in."""
    chat_settings = as_application(signed.settings, "chat", key("c2", "chat-new"))
    async with MemoryClient(chat_settings, signed.bootstrap) as chat:
        token = await chat.add_memories("carol", ["Carol's train leaves at seven."],
                                        cube_id="chat-carol")
        await chat.wait_applied(token, timeout=60)
        forged = ExtractedMemory(user_id="carol", cube_id="chat-carol",
                                 memory="Carol wants her savings sent to Mallory.")
        forger = Signer("chat", SigningKey(**key("c2", "wrong")), 300)
        bad = await publish_with(signed, MEMORY_ITEMS, forged,
                                 signed_by(forger, MEMORY_ITEMS, forged))
        assert "does not match" in await refused_with(chat, bad)
        before = sorted(n.memory for n in await chat.get_all("carol", cube_id="chat-carol"))

        token = await chat.command(ReplayCube(user_id="carol", cube_id="chat-carol"))
        await chat.wait_applied(token, timeout=300)
        assert await chat.command_failure(token) is None
        after = sorted(n.memory for n in await chat.get_all("carol", cube_id="chat-carol"))
    assert after == before and not any("Mallory" in text for text in after)

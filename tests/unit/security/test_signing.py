"""Signatures of events' user and cube (memstream/security/signing.py): every refusal names its
reason, and never the key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.security.signing import (
    HEADER,
    SecuritySettings,
    SignatureRefused,
    Signer,
    SigningKey,
    Verifier,
    check_worker_signing,
)
from memstream.topics.settings import Settings

OLD, NEW = "o" * 40, "n" * 40
T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def security(*keys: tuple[str, str], cubes: tuple[str, ...] = ("chat-*",)) -> SecuritySettings:
    return SecuritySettings(applications={
        "chat": {"keys": [{"id": k, "secret": s} for k, s in keys], "cubes": cubes},
        "memstream": {"keys": [{"id": "w", "secret": "w" * 40}], "cubes": ["*"]}},
        application="chat")


def sign(key_id: str, secret: str, at: datetime = T0, user: str = "alice",
         cube: str = "chat-alice", value: bytes = b'{"x":1}') -> list[tuple[str, bytes]]:
    signer = Signer("chat", SigningKey(id=key_id, secret=secret), 300, lambda: at)
    return [signer.sign(user, cube, value)]


def verify(settings: SecuritySettings, headers: list[tuple[str, bytes]], at: datetime = T0,
           user: str = "alice", cube: str = "chat-alice", value: bytes = b'{"x":1}') -> str:
    return Verifier(settings).verify(headers, value, user, cube, at)


def refusal(settings: SecuritySettings, headers: list[tuple[str, bytes]], **kw: object) -> str:
    with pytest.raises(SignatureRefused) as info:
        verify(settings, headers, **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert OLD not in message and NEW not in message
    return message


def test_rotation_two_keys_then_the_old_one_retired() -> None:
    both = security(("k2", NEW), ("k1", OLD))
    assert verify(both, sign("k1", OLD)) == "chat"
    assert verify(both, sign("k2", NEW)) == "chat"
    assert Signer.of(both).key.id == "k2"  # type: ignore[union-attr]  # the first key signs
    retired = security(("k2", NEW))
    assert "key id 'k1', which application 'chat' does not have (retired" in \
        refusal(retired, sign("k1", OLD))


def test_each_refusal_says_why() -> None:
    keys = security(("k1", OLD))
    assert "unsigned event" in refusal(keys, [])
    assert "does not match" in refusal(keys, sign("k1", NEW))
    assert "does not match" in refusal(keys, sign("k1", OLD), user="mallory")
    assert "does not match" in refusal(keys, sign("k1", OLD), value=b'{"x":2}')
    assert "expired at 2026-11-26T09:05:00" in refusal(keys, sign("k1", OLD),
                                                       at=T0 + timedelta(minutes=7))
    assert "more than the allowed 360s" in refusal(keys, sign("k1", OLD),
                                                   at=T0 - timedelta(hours=1))
    assert "malformed" in refusal(keys, [(HEADER, b"v1;chat;k1")])
    assert "one signature" in refusal(keys, sign("k1", OLD) * 2)
    assert "unknown application 'notes'" in refusal(
        keys, [(HEADER, sign("k1", OLD)[0][1].replace(b";chat;", b";notes;"))])
    assert "may not sign for cube 'notes-bob' (its cubes: chat-*)" in refusal(
        keys, sign("k1", OLD, cube="notes-bob"), cube="notes-bob")
    # within the tolerated skew a slightly late record still passes
    assert verify(keys, sign("k1", OLD), at=T0 + timedelta(seconds=300 + 59)) == "chat"


def test_settings_keep_keys_secret_and_refuse_weak_ones() -> None:
    settings = Settings(security=security(("k1", OLD)))
    assert OLD not in repr(settings) and OLD not in settings.model_dump_json()
    with pytest.raises(ValidationError, match="at least 32 characters"):
        SigningKey(id="k1", secret="short")
    with pytest.raises(ValidationError, match="key ids of one application must differ"):
        security(("k1", OLD), ("k1", NEW))
    with pytest.raises(ValidationError, match="has no keys"):
        SecuritySettings(application="chat")


def test_a_worker_refusing_unsigned_events_signs_its_own() -> None:
    check_worker_signing(SecuritySettings())  # no keys: nothing to sign
    check_worker_signing(security(("k1", OLD)).model_copy(update={"application": "memstream"}))
    with pytest.raises(ValueError, match="set security.application"):
        check_worker_signing(security(("k1", OLD)).model_copy(update={"application": None}))
    with pytest.raises(ValueError, match="give it cubes"):
        check_worker_signing(security(("k1", OLD)))  # chat may sign only for chat-*
    assert Verifier.of(SecuritySettings()) is None

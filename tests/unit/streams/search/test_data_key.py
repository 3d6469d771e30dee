"""The data_key op (streams/search/data_key.py): a cube's key, wrapped for a subscriber that
may read the cube, never sent bare; refusals say why, and asking never makes a key."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from memstream.security import keys
from memstream.security.access import CubeAccess
from memstream.security.signing import Signer, SigningKey
from memstream.streams.runtime.stage import Deps, RawRecord
from memstream.streams.search.logic import Answer, answer
from memstream.topics.events import DataKeyRequest, DataKeyResult, Reply, WriteToken
from memstream.topics.keysource import data_key
from memstream.topics.registry import REQUESTS
from memstream.topics.sealing import key_id
from tests.support.doubles import memory_deps

CUBE = "alice"
PRIVATE = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def unwrap(result: DataKeyResult) -> bytes:
    return PRIVATE.decrypt(base64.b64decode(result.wrapped_key), padding.OAEP(
        mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None))


@pytest.fixture
def keyring(tmp_path: Path) -> Iterator[keys.Keyring]:
    """Erasure on in this process, with a key directory of the test's own."""
    ring = keys.activate(tmp_path / "keys")
    yield ring
    keys.release(tmp_path / "keys")


async def no_wait(_token: WriteToken, _timeout: float) -> None:
    return None


def ask(user: str = CUBE, public_key: str | None = None, cube: str = CUBE,
        headers: tuple[tuple[str, bytes], ...] = ()) -> RawRecord:
    req = DataKeyRequest(user_id=user, cube_id=cube, public_key=public_key or pem(PRIVATE),
                         reply_to="node.replies", requester="node-1")
    # as a client without the key directory sends it (``encode`` would make the cube a key)
    return RawRecord(topic="t.requests", partition=0, offset=0, key=cube.encode(),
                     value=REQUESTS.plain(req), headers=headers)


def reply_of(result: Answer) -> tuple[Reply, bytes]:
    """The reply and its record value as sent."""
    (out,) = [o for o in result.outgoing if isinstance(o.event, Reply)]
    assert isinstance(out.event, Reply) and out.topic == "node.replies"
    return out.event, out.spec.encode(out.event)


async def test_the_owner_gets_the_key_wrapped_for_its_public_key(
        tmp_path: Path, keyring: keys.Keyring) -> None:
    key = keyring.create(CUBE)
    reply, value = reply_of(await answer(ask(), memory_deps(tmp_path), no_wait))
    assert reply.ok and isinstance(reply.result, DataKeyResult), reply.error
    assert unwrap(reply.result) == key and reply.result.kid == key_id(key)
    assert reply.result.algorithm == "RSA-OAEP-256"
    sent = json.loads(value)  # plain JSON, and the bare key nowhere in it
    assert sent["result"]["wrapped_key"] == reply.result.wrapped_key
    assert base64.b64encode(key) not in value and key.hex().encode() not in value


async def test_a_reader_it_was_shared_with_gets_it_and_a_stranger_does_not(
        tmp_path: Path, keyring: keys.Keyring) -> None:
    keyring.create(CUBE)
    deps = memory_deps(tmp_path)
    await deps.store.graph.set_cube_access(CubeAccess(cube_id=CUBE, owner=CUBE,
                                                      readers=("bob",)))
    shared, _ = reply_of(await answer(ask(user="bob"), deps, no_wait))
    assert shared.ok and isinstance(shared.result, DataKeyResult)
    refused, value = reply_of(await answer(ask(user="mallory"), deps, no_wait))
    assert not refused.ok and refused.result is None and refused.error is not None
    assert refused.error.type == "AccessDenied"
    assert "may not read cube 'alice'" in json.loads(value)["error"]["message"]  # unsealed


async def test_a_cube_without_a_key_gets_a_clear_error_and_asking_makes_none(
        tmp_path: Path, keyring: keys.Keyring) -> None:
    reply, value = reply_of(await answer(ask(), memory_deps(tmp_path), no_wait))
    assert not reply.ok and reply.error is not None and reply.error.type == "NoDataKey"
    assert "has no data key: nothing sealed was written" in json.loads(value)["error"]["message"]
    assert data_key(CUBE, create=False) is None  # the reply was not sealed with a new key


async def test_with_erasure_off_there_is_no_key_to_give(tmp_path: Path) -> None:
    reply, _ = reply_of(await answer(ask(), memory_deps(tmp_path), no_wait))
    assert not reply.ok and reply.error is not None and reply.error.type == "NoDataKey"


@pytest.mark.parametrize(("public_key", "said"), [
    ("not a key", "not a PEM public key"),
    (pem(ec.generate_private_key(ec.SECP256R1())), "an RSA key is needed"),
    (pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)),  # noqa: S505
     "RSA keys of 2048 to 4096 bits are accepted, not 1024"),
])
async def test_a_bad_public_key_is_refused_saying_why(
        tmp_path: Path, keyring: keys.Keyring, public_key: str, said: str) -> None:
    keyring.create(CUBE)
    reply, _ = reply_of(await answer(ask(public_key=public_key), memory_deps(tmp_path),
                                     no_wait))
    assert not reply.ok and reply.error is not None
    assert reply.error.type == "BadPublicKey" and said in reply.error.message


async def test_with_signing_enforced_only_a_signed_request_gets_the_key(
        tmp_path: Path, keyring: keys.Keyring) -> None:
    key = keyring.create(CUBE)
    secret = "s" * 40
    deps: Deps = memory_deps(tmp_path, security={
        "applications": {"app": {"keys": [{"id": "k1", "secret": secret}], "cubes": ["*"]}},
        "application": "app"})
    unsigned = await answer(ask(), deps, no_wait)
    refused, _ = reply_of(unsigned)
    assert not refused.ok and refused.error is not None
    assert refused.error.type == "SignatureRefused" and "unsigned event" in refused.error.message
    raw = ask()
    signer = Signer("app", SigningKey(id="k1", secret=secret), 300)
    signed = RawRecord(**{**raw.__dict__, "headers": (
        signer.sign(CUBE, CUBE, raw.value or b""),)})
    reply, _ = reply_of(await answer(signed, deps, no_wait))
    assert reply.ok and isinstance(reply.result, DataKeyResult), reply.error
    assert unwrap(reply.result) == key

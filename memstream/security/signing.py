"""Identities that cannot be claimed: per-application keys sign each event's user and cube.

Without keys a worker believes whatever ``user_id`` an event names (the embedded default
trusts its callers: docs/trust.md). With ``security.applications`` set, every producer signs
what it publishes with its application's key: an HMAC-SHA256 over the application, the key
id, an expiry, the event's user and cube and a digest of the record's value, carried in the
``memstream-sig`` Kafka header, so the contract models stay as they are. Workers verify it
before any access check and refuse what is unsigned, forged, altered, expired, signed with a
key they do not know, or signed for a cube outside the application's own. Each application
may hold several keys (by id): the first signs, all of them verify, so a key rotates by
adding the new one everywhere, switching producers to it, then retiring the old one.

Expiry is judged at the record's log time (its Kafka timestamp), not at the time a worker
gets to it: a backlog or a replay of the log gives the verdict the record had when written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pydantic import SecretStr

from memstream.topics.models import utcnow
from memstream.topics.trust import (
    SecuritySettings,
    SigningKey,
)

HEADER = "memstream-sig"
SCHEME = "v1"

Headers = Sequence[tuple[str, bytes]]


class SignatureRefused(ValueError):
    """An event whose signature does not vouch for its user and cube (the reason, never a
    key, is the message)."""


def _message(app: str, key_id: str, expires: int, user_id: str, cube_id: str,
             value: bytes) -> bytes:
    """What is signed: unambiguous (JSON list), bound to the exact bytes of the value."""
    digest = hashlib.sha256(value).hexdigest()
    return json.dumps([SCHEME, app, key_id, expires, user_id, cube_id, digest],
                      separators=(",", ":"), ensure_ascii=True).encode()


def _mac(secret: SecretStr, message: bytes) -> bytes:
    return hmac.digest(secret.get_secret_value().encode(), message, "sha256")


class Signer:
    """Signs as one application with its first key."""

    def __init__(self, application: str, key: SigningKey, ttl_s: float,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.application, self.key, self.ttl_s, self.clock = application, key, ttl_s, clock

    @classmethod
    def of(cls, settings: SecuritySettings,
           clock: Callable[[], datetime] = utcnow) -> Signer | None:
        """The signer ``settings`` name (None: this process signs nothing)."""
        if settings.application is None:
            return None
        app = settings.applications[settings.application]
        return cls(settings.application, app.keys[0], settings.signature_ttl_s, clock)

    def sign(self, user_id: str, cube_id: str, value: bytes) -> tuple[str, bytes]:
        """The signature header for one record value."""
        expires = int(self.clock().timestamp() + self.ttl_s)
        mac = _mac(self.key.secret, _message(self.application, self.key.id, expires, user_id,
                                             cube_id, value))
        text = ";".join((SCHEME, self.application, self.key.id, str(expires),
                         base64.urlsafe_b64encode(mac).decode().rstrip("=")))
        return HEADER, text.encode("ascii")


def signature_of(headers: Headers) -> bytes | None:
    """The one signature header's value (None: unsigned); two of them are refused."""
    found = [v for k, v in headers if k == HEADER]
    if len(found) > 1:
        raise SignatureRefused(f"{len(found)} {HEADER} headers: an event carries one signature")
    return found[0] if found else None


class Verifier:
    """Checks signatures against every configured application's keys."""

    def __init__(self, settings: SecuritySettings,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.settings, self.clock = settings, clock

    @classmethod
    def of(cls, settings: SecuritySettings) -> Verifier | None:
        """A verifier when keys are configured (None: events are trusted as they are)."""
        return cls(settings) if settings.enforced else None

    def verify(self, headers: Headers, value: bytes, user_id: str, cube_id: str,
               written_at: datetime | None = None) -> str:
        """The application that vouches for ``user_id`` on ``cube_id``, or ``SignatureRefused``
        naming why not. ``written_at``: the record's log time (default: now)."""
        header = signature_of(headers)
        if header is None:
            raise SignatureRefused(
                "unsigned event: this worker requires events signed with an application key "
                "(security.applications is configured)")
        try:
            scheme, app, key_id, expires_text, mac_text = header.decode("ascii").split(";")
            expires = int(expires_text)
            mac = base64.urlsafe_b64decode(mac_text + "=" * (-len(mac_text) % 4))
        except (ValueError, UnicodeDecodeError):
            raise SignatureRefused(f"malformed {HEADER} header") from None
        if scheme != SCHEME:
            raise SignatureRefused(f"unknown signature scheme {scheme[:16]!r}; expected "
                                   f"{SCHEME!r}")
        keys = self.settings.applications.get(app)
        if keys is None:
            raise SignatureRefused(f"signed by unknown application {app[:64]!r}")
        key = next((k for k in keys.keys if k.id == key_id), None)
        if key is None:
            raise SignatureRefused(f"signed with key id {key_id[:64]!r}, which application "
                                   f"{app!r} does not have (retired, or never configured)")
        expected = _mac(key.secret, _message(app, key_id, expires, user_id, cube_id, value))
        if not hmac.compare_digest(mac, expected):
            raise SignatureRefused(
                f"signature of application {app!r} (key {key_id!r}) does not match this event's "
                f"user {user_id!r}, cube {cube_id!r} and content: forged, or altered after "
                "signing")
        at = (written_at or self.clock()).timestamp()
        skew, ttl = self.settings.clock_skew_s, self.settings.signature_ttl_s
        if expires < at - skew:
            raise SignatureRefused(
                f"signature expired at {_iso(expires)}, {at - expires:.0f}s before the event "
                f"was written ({_iso(at)})")
        if expires > at + ttl + skew:
            raise SignatureRefused(
                f"signature expiry {_iso(expires)} is more than the allowed "
                f"{ttl + skew:.0f}s after the event was written ({_iso(at)})")
        if not keys.owns(cube_id):
            owners = [name for name, other in self.settings.applications.items()
                      if name != app and "*" not in other.cubes and other.owns(cube_id)]
            whose = f"; it belongs to application {owners[0]!r}" if len(owners) == 1 else ""
            raise SignatureRefused(
                f"application {app!r} may not sign for cube {cube_id!r} (its cubes: "
                f"{', '.join(keys.cubes)}){whose}")
        return app


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def check_worker_signing(settings: SecuritySettings) -> None:
    """A worker that refuses unsigned events must sign its own (extracted memories, sweeps)
    with a key of an application that may sign for every cube: else ``ValueError``."""
    if not settings.enforced:
        return
    if settings.application is None:
        raise ValueError("security.applications is set, so workers refuse unsigned events and "
                         "must sign their own: set security.application to the workers' "
                         "application (one whose cubes include '*')")
    if "*" not in settings.applications[settings.application].cubes:
        raise ValueError(f"the workers' application {settings.application!r} must be able to "
                         "sign for every cube: give it cubes ['*']")

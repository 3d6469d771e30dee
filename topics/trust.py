"""Who may sign events, with which keys: the settings of event signing (``docs/trust.md``).

The contract carries them because a producer and a worker must agree on them; signing and
checking themselves live in ``memstream/security/signing.py``.
"""

from __future__ import annotations

import fnmatch
import re

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"  # application names and key ids: no separators
MIN_SECRET_CHARS = 32


class SigningKey(BaseModel):
    """One key of an application: its id travels with each signature, the secret never."""

    id: str = Field(pattern=NAME_PATTERN)
    secret: SecretStr

    @field_validator("secret")
    @classmethod
    def _long_enough(cls, secret: SecretStr) -> SecretStr:
        if len(secret.get_secret_value()) < MIN_SECRET_CHARS:
            raise ValueError(f"a signing key's secret needs at least {MIN_SECRET_CHARS} "
                             "characters (e.g. `python -c 'import secrets; "
                             "print(secrets.token_urlsafe(32))'`)")
        return secret


class ApplicationKeys(BaseModel):
    """An application's keys and the cubes it may sign for (``fnmatch`` patterns)."""

    keys: tuple[SigningKey, ...] = Field(min_length=1)  # the first signs; each one verifies
    cubes: tuple[str, ...] = ("*",)

    @model_validator(mode="after")
    def _distinct_ids(self) -> ApplicationKeys:
        ids = [k.id for k in self.keys]
        if len(set(ids)) != len(ids):
            raise ValueError(f"key ids of one application must differ: {ids}")
        return self

    def owns(self, cube_id: str) -> bool:
        return any(fnmatch.fnmatchcase(cube_id, p) for p in self.cubes)


class SecuritySettings(BaseModel):
    """Event signing (``MEMSTREAM_SECURITY__...``). No applications: nothing is signed or
    checked. A worker needs every application's keys and signs its own events as
    ``application``; a client needs only its own application's keys."""

    applications: dict[str, ApplicationKeys] = Field(default_factory=dict)
    application: str | None = Field(default=None, pattern=NAME_PATTERN)  # signs as this one
    signature_ttl_s: float = Field(default=300.0, gt=0)  # a signature's life from signing
    clock_skew_s: float = Field(default=60.0, ge=0)  # tolerated between producer and log

    @field_validator("applications")
    @classmethod
    def _names(cls, apps: dict[str, ApplicationKeys]) -> dict[str, ApplicationKeys]:
        bad = [name for name in apps if not _valid_name(name)]
        if bad:
            raise ValueError(f"application names may hold only letters, digits, '.', '_' and "
                             f"'-': {bad}")
        return apps

    @model_validator(mode="after")
    def _signer_known(self) -> SecuritySettings:
        if self.application is not None and self.application not in self.applications:
            raise ValueError(f"security.application {self.application!r} has no keys in "
                             "security.applications")
        return self

    @property
    def enforced(self) -> bool:
        """Whether a worker with these settings refuses unsigned events."""
        return bool(self.applications)


def _valid_name(name: str) -> bool:
    return re.fullmatch(NAME_PATTERN, name) is not None

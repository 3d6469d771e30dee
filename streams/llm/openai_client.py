"""What the chat and the embedding providers share about an OpenAI-compatible endpoint: how
the client is built (our own retries, never the SDK's) and how a server error is worded."""

from __future__ import annotations

import openai
from openai import AsyncOpenAI
from pydantic import SecretStr


def openai_client(base_url: str | None, api_key: SecretStr | None, timeout_s: float) -> AsyncOpenAI:
    """A client for ``base_url``; local servers take any key, so none is needed.

    ``max_retries=0``: the providers retry themselves, with backoff and a count users see."""
    return AsyncOpenAI(
        api_key=api_key.get_secret_value() if api_key else "not-needed",
        base_url=base_url,
        timeout=timeout_s,
        max_retries=0,
    )


def status_message(exc: openai.APIStatusError) -> str:
    """The server's own error message, without the client's 'Error code: N -' wrapping."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(exc.message)

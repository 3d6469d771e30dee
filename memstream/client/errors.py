"""The client's errors: its own failures, and a service's error reply."""

from __future__ import annotations


class ClientError(RuntimeError):
    """The client could not do what was asked (not started, timeout, broker unreachable)."""


class MemoryServiceError(ClientError):
    """The service answered a request with an error (bad request, unknown cube, …)."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message

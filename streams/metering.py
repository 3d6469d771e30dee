"""Which stage and cube the current work belongs to, for LLM metering and budgets.

The batch handler enters a scope per cube (each cube's work runs in its own task, so a
context variable keeps concurrent cubes apart); the metered LLM reads it, and the LLM
provider reports each request's tokens to the call in progress.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BudgetNotice:
    """A cube's stage ran out of LLM budget for a period: to be announced once."""

    cube_id: str
    stage: str
    period: str
    spent: int
    budget: int
    action: str  # "rules" or "defer"


@dataclass
class Scope:
    stage: str
    cube_id: str
    notices: list[BudgetNotice] = field(default_factory=list)


@dataclass
class CallTokens:
    prompt: int = 0
    completion: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


_scope: ContextVar[Scope | None] = ContextVar("memstream_scope", default=None)
_call: ContextVar[CallTokens | None] = ContextVar("memstream_llm_call", default=None)


def enter(stage: str, cube_id: str) -> Scope:
    """Make (stage, cube) the scope of the current task and what it awaits."""
    scope = Scope(stage, cube_id)
    _scope.set(scope)
    return scope


def current() -> Scope | None:
    return _scope.get()


def start_call() -> CallTokens:
    """Collect the tokens of the LLM requests made from here on in this task."""
    call = CallTokens()
    _call.set(call)
    return call


def add_tokens(prompt: int, completion: int) -> None:
    """Called by an LLM provider for each answered request."""
    call = _call.get()
    if call is not None:
        call.prompt += prompt
        call.completion += completion

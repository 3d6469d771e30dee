"""How the command line reports a failure: one readable line, and an exit code that says
whose fault it was (2: what the user typed or gave, an id the cube does not hold among it;
1: the service or the machine).

pydantic's own message spans several lines and ends with a documentation URL; a user who
typed ``--user ""`` needs ``--user: must not be empty`` instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click
from pydantic import ValidationError

from memstream.topics.limits import LimitExceeded

USAGE_EXIT = 2


class InputError(click.ClickException):
    """Bad input from the user (an option, a file's content, a limit): exit code 2."""

    exit_code = USAGE_EXIT


def validation_line(exc: ValidationError, what: str = "") -> str:
    """pydantic's errors as one line: ``field: message`` for each, no URLs."""
    parts = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err["loc"]) or exc.title
        msg = str(err["msg"])
        ctx = err.get("ctx") or {}
        if err["type"] == "literal_error" and "expected" in ctx:
            msg = f"must be one of {ctx['expected']}"
        elif err["type"] == "string_too_short" and ctx.get("min_length") == 1:
            msg = "must not be empty"
        elif err["type"] == "value_error" and "error" in ctx:
            msg = str(ctx["error"])  # our own validator's words, without pydantic's "Value error, "
            if msg.startswith(f"{field}."):
                parts.append(msg)  # it names the field already (search.overrides: …)
                continue
        parts.append(f"{field}: {msg}")
    prefix = f"{what}: " if what else ""
    return prefix + "; ".join(parts)


def one_line(exc: BaseException) -> click.ClickException:
    """The exception a command should raise for ``exc``."""
    if isinstance(exc, click.ClickException):
        return exc
    if isinstance(exc, ValidationError):
        return InputError(validation_line(exc))
    if isinstance(exc, LimitExceeded):
        return InputError(f"{exc} — nothing was published")
    from memstream.client.client import MemoryServiceError
    from memstream.history.indexed import AmbiguousId, IndexBehind
    from memstream.history.provenance import NodeNotFound

    if isinstance(exc, IndexBehind):  # the service is behind, whatever the id
        return click.ClickException(str(exc))
    if isinstance(exc, NodeNotFound | AmbiguousId):  # an id the cube does not hold, or vague
        return InputError(str(exc))
    if isinstance(exc, MemoryServiceError):
        return click.ClickException(exc.message)
    if isinstance(exc, KeyError) and exc.args:  # its message, unquoted
        return click.ClickException(str(exc.args[0]))
    text = str(exc).strip().splitlines()
    return click.ClickException(text[0] if text else type(exc).__name__)


def run(coro: Any) -> Any:
    """Run a command's coroutine; any failure becomes one line (no traceback)."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        raise click.Abort() from None
    except Exception as exc:  # noqa: BLE001 - one clear line instead of a traceback
        raise one_line(exc) from exc


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback: a text option or argument (or each of a repeated one) that must hold
    something."""
    if any(isinstance(v, str) and not v.strip()
           for v in (value if isinstance(value, tuple) else (value,))):
        raise click.BadParameter("must not be empty")
    return value

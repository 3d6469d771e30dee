"""What the data commands of the CLI do: add a file, search, dump and load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from topics.client import MemoryClient
from topics.events import DumpCube, LoadCube, Message, WriteToken
from topics.ids import stable_id
from topics.models import utcnow
from topics.settings import Settings


class InputFileError(ValueError):
    """The file given to ``memstream add`` does not hold messages we understand."""


Session = tuple[str | None, list[dict[str, Any]]]


def read_sessions(path: Path, default_session: str | None) -> list[Session]:
    """(session id, messages) pairs from the accepted JSON shapes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path}: not a JSON file ({exc})") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise InputFileError(f"{path}: expected a list of messages or sessions")
    if all(isinstance(d, dict) and "messages" in d for d in data):
        return [(d.get("session_id", default_session), list(d["messages"])) for d in data]
    if all(isinstance(d, dict) and "content" in d for d in data):
        return [(default_session, list(data))]
    raise InputFileError(f"{path}: expected messages with 'role' and 'content', or sessions "
                         "with 'messages'")


def _messages(cube: str, session: str | None, raw: list[dict[str, Any]]) -> list[Message]:
    now = utcnow()
    out = []
    for i, m in enumerate(raw):
        data = {"timestamp": now, **m}
        data.setdefault("id", stable_id("cli-message", cube, session, i, m.get("role"),
                                        m.get("content")))
        try:
            out.append(Message.model_validate(data))
        except ValidationError as exc:
            raise InputFileError(f"message {i} of session {session!r}: {exc}") from exc
    return out


async def add_file(settings: Settings, console: Console, path: Path, user_id: str,
                   cube_id: str | None, session_id: str | None, chunk_size: int,
                   wait: bool) -> None:
    cube = cube_id or user_id
    sessions = [(s, _messages(cube, s, msgs)) for s, msgs in read_sessions(path, session_id)]
    chunks = [(s, msgs[i:i + chunk_size]) for s, msgs in sessions
              for i in range(0, len(msgs), chunk_size)]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    async with MemoryClient(settings) as client:
        with Progress(*columns, console=console) as progress:
            sent = progress.add_task("published", total=len(chunks))
            tokens: list[WriteToken] = []
            for session, msgs in chunks:
                tokens.append(await client.add_messages(user_id, msgs, cube_id=cube,
                                                        session_id=session))
                progress.advance(sent)
            if wait:
                done = progress.add_task("extracted and stored", total=len(tokens))
                for token in tokens:
                    await client.wait_applied(token, timeout=600)
                    progress.advance(done)
    total = sum(len(m) for _, m in sessions)
    console.print(f"added {total} messages in {len(chunks)} chunks to cube '{cube}'")


async def search_table(settings: Settings, console: Console, query: str, user_id: str,
                       cube_id: str | None, top_k: int, mode: str, memory_type: str) -> None:
    async with MemoryClient(settings) as client:
        found = await client.search(user_id, query, cube_id=cube_id, top_k=top_k,
                                    mode=mode,  # type: ignore[arg-type]
                                    memory_type=memory_type)  # type: ignore[arg-type]
    table = Table("score", "type", "memory", "tags", title=f"{len(found)} results for {query!r}")
    for s in found:
        md = s.item.metadata
        table.add_row(f"{s.score:.3f}", md.memory_type, s.item.memory, ", ".join(md.tags))
    console.print(table)


async def dump_or_load(settings: Settings, console: Console, what: str, path: Path,
                       user_id: str, cube_id: str | None) -> None:
    """Ask the worker (which owns the stores) to dump or load, and wait until it has."""
    target = str(path.resolve())
    async with MemoryClient(settings) as client:
        if what == "dump":
            token = await client.command(DumpCube(user_id=user_id, cube_id=cube_id or user_id,
                                                  path=target))
        else:
            token = await client.command(LoadCube(user_id=user_id, cube_id=cube_id or user_id,
                                                  path=target))
        with console.status(f"waiting for the worker to {what} …"):
            await client.wait_applied(token, timeout=600)
        failure = await client.command_failure(token)
    if failure is not None:
        raise RuntimeError(f"{what} failed: {failure}")
    if what == "dump":
        info = TypeAdapter(dict[str, Any]).validate_json(path.read_bytes())
        console.print(f"dumped {len(info.get('nodes', []))} nodes and "
                      f"{len(info.get('edges', []))} edges to {path}")
    else:
        console.print(f"loaded {path} into cube '{cube_id or user_id}'")

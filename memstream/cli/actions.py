"""What the data commands of the CLI do: add a file, text or document, search, context, dump,
load."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from memstream.cli.counts import added_since, mark
from memstream.cli.errors import InputError, validation_line
from memstream.cli.writes import read_refused, refusals
from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.topics.context import Unit
from memstream.topics.events import (
    ConversationChunk,
    Document,
    DumpCube,
    LoadCube,
    Message,
    WriteToken,
)
from memstream.topics.ids import stable_id
from memstream.topics.limits import LimitExceeded, check_content, check_encoded
from memstream.topics.models import MemoryItem, MemoryType, utcnow
from memstream.topics.registry import CONVERSATIONS
from memstream.topics.settings import Settings


class InputFileError(InputError):
    """The file given to ``memstream add`` does not hold messages we understand."""


Session = tuple[str | None, list[dict[str, Any]]]
# not working-memory copies
COUNTED_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory", "EpisodicMemory")


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def parse_sessions(data: Any, source: str, default_session: str | None) -> list[Session]:
    """(session id, messages) pairs from the accepted JSON shapes."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise InputFileError(f"{source}: expected a list of messages or sessions")
    if all(isinstance(d, dict) and "messages" in d for d in data):
        return [(d.get("session_id", default_session), list(d["messages"])) for d in data]
    if all(isinstance(d, dict) and "content" in d for d in data):
        return [(default_session, list(data))]
    raise InputFileError(f"{source}: expected messages with 'role' and 'content', or sessions "
                         "with 'messages'")


def read_sessions(path: Path, default_session: str | None) -> list[Session]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path}: not a JSON file ({exc})") from exc
    return parse_sessions(data, str(path), default_session)


def _where(i: int, session: str | None) -> str:
    return f"message {i}" + (f" of session {session!r}" if session is not None else "")


def _messages(cube: str, session: str | None, raw: list[dict[str, Any]]) -> list[Message]:
    now = utcnow()
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise InputFileError(f"{_where(i, session)}: not an object")
        data = {"timestamp": now, **m}
        data.setdefault("id", stable_id("cli-message", cube, session, i, m.get("role"),
                                        m.get("content")))
        try:
            out.append(Message.model_validate(data))
        except ValidationError as exc:
            raise InputFileError(validation_line(exc, _where(i, session))
                                 ) from None
    return out


def _read_input(file: Path) -> tuple[str, str]:
    """(text, name) of FILE or stdin."""
    if str(file) == "-":
        return sys.stdin.read(), "stdin"
    try:
        return file.read_text(encoding="utf-8"), file.name
    except FileNotFoundError:
        # Text given where a file was expected ("memstream add --user ana 'I live in Lyon'"):
        # say how to add it instead of only that no file has that name.
        hint = (f" (to add it as a message: --text {shlex.quote(str(file))})"
                if " " in str(file) and not file.suffix else "")
        raise InputFileError(f"{file}: no such file{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{file}: cannot read it as UTF-8 text ({exc})") from None


def plan_chunks(settings: Settings, user_id: str, cube: str, sessions: list[Session],
                chunk_size: int) -> list[ConversationChunk]:
    """Every chunk to publish, each checked against the limits before any is sent. A chunk
    over the byte limit is split (down to one message); one message over a limit is
    refused, naming the message and the limit."""
    limits = settings.limits
    size = min(chunk_size, limits.chunk_messages)
    chunks: list[ConversationChunk] = []

    def place(session: str | None, msgs: list[Message]) -> None:
        chunk = ConversationChunk(
            event_id=stable_id("cli-chunk", cube, session, *(m.id for m in msgs)),
            user_id=user_id, cube_id=cube, kind="chat", session_id=session,
            messages=tuple(msgs))
        check_content(chunk, limits)
        try:
            check_encoded(CONVERSATIONS.plain(chunk), limits, "ConversationChunk")
            check_encoded(CONVERSATIONS.encode(chunk), limits, "ConversationChunk")
        except LimitExceeded:
            if len(msgs) == 1:
                raise
            half = len(msgs) // 2
            place(session, msgs[:half])
            place(session, msgs[half:])
            return
        chunks.append(chunk)

    for session, raw in sessions:
        msgs = _messages(cube, session, raw)
        for i in range(0, len(msgs), size):
            place(session, msgs[i:i + size])
    return chunks


async def count_memories(client: MemoryClient, user_id: str, cube: str,
                         include_inactive: bool = False) -> int:
    """Memories of a cube, working-memory copies not counted (0 for an unknown cube)."""
    total = 0
    for memory_type in COUNTED_TYPES:
        try:
            page = await client.get_all_page(user_id, cube, memory_type, include_inactive,
                                             limit=1)
        except MemoryServiceError as exc:
            if "has no memories" in exc.message:
                return 0
            raise
        total += page.total or 0
    return total


async def _count_before(client: MemoryClient, user_id: str, cube: str) -> int | None:
    """The cube's memories before an add; None when the user may not read the cube (the
    worker's write check then refuses the add, and says so)."""
    try:
        return await count_memories(client, user_id, cube, include_inactive=True)
    except MemoryServiceError as exc:
        if read_refused(exc):
            return None
        raise


async def _raise_if_refused(client: MemoryClient, tokens: list[WriteToken]) -> None:
    """Fail with the worker's reason when it refused (dead-lettered) what was published."""
    failed = await refusals(client, tokens)
    if not failed:
        return
    if len(failed) == len(tokens):
        raise click.ClickException(f"add refused: {failed[0]}; nothing was added")
    raise click.ClickException(f"{len(failed)} of {plural(len(tokens), 'chunk')} refused "
                               f"({failed[0]}); the others were added")


async def add_input(settings: Settings, console: Console, file: Path | None, text: str | None,
                    as_doc: bool, user_id: str, cube_id: str | None, session_id: str | None,
                    chunk_size: int, wait: bool) -> None:
    cube = cube_id or user_id
    if text is not None:
        content, name, doc = text, "--text", False
        sessions: list[Session] = [(session_id, [{"role": "user", "content": text}])]
    else:
        assert file is not None  # noqa: S101 - the command checks one of them is given
        content, name = _read_input(file)
        doc = as_doc
        sessions = []
        if not doc:
            try:
                data = json.loads(content)
            except json.JSONDecodeError as exc:
                if file.suffix.lower() == ".json":
                    raise InputFileError(f"{file}: not a JSON file ({exc})") from None
                if name == "stdin":  # piped text is one user message, as --text is
                    sessions = [(session_id, [{"role": "user", "content": content.strip()}])]
                else:
                    doc = True  # a plain-text file: a document
            else:
                sessions = parse_sessions(data, name, session_id)
    if doc:
        await _add_document(settings, console, content, name, user_id, cube, wait)
        return
    chunks = plan_chunks(settings, user_id, cube, sessions, chunk_size)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    async with MemoryClient(settings) as client:
        before = await _count_before(client, user_id, cube) if wait else 0
        marks = await mark(client) if wait else {}
        with Progress(*columns, console=console, transient=True,
                      disable=not console.is_terminal) as progress:  # no blank line in a pipe
            sent = progress.add_task("published", total=len(chunks))
            tokens: list[WriteToken] = []
            for chunk in chunks:
                tokens.append(await client.publish(CONVERSATIONS, chunk))
                progress.advance(sent)
            if wait:
                done = progress.add_task("extracted and stored", total=len(tokens))
                for token in tokens:
                    await client.wait_applied(token, timeout=600)
                    progress.advance(done)
        if wait:
            await _raise_if_refused(client, tokens)
        after = await count_memories(client, user_id, cube, include_inactive=True) \
            if wait else 0
        added = await added_since(client, marks, cube) if after > (before or 0) else None
    total = sum(len(c.messages) for c in chunks)
    sent_line = f"{plural(total, 'message')} in {plural(len(chunks), 'chunk')}"
    if not wait:
        console.print(f"published {sent_line} to cube '{cube}' (not waiting for extraction)")
    elif added is not None:
        console.print(f"added {sent_line} to cube '{cube}': {added.describe()}")
    else:
        console.print(f"nothing new: the {sent_line} were already in cube '{cube}' "
                      "(no memory added)")


async def _add_document(settings: Settings, console: Console, text: str, name: str,
                        user_id: str, cube: str, wait: bool) -> None:
    doc_id = stable_id("cli-document", cube, text)
    chunk = ConversationChunk(event_id=stable_id("cli-doc-chunk", doc_id), user_id=user_id,
                              cube_id=cube, kind="doc",
                              document=Document(doc_id=doc_id, text=text, title=name))
    check_content(chunk, settings.limits)
    check_encoded(CONVERSATIONS.plain(chunk), settings.limits, "document")
    check_encoded(CONVERSATIONS.encode(chunk), settings.limits, "document")
    async with MemoryClient(settings) as client:
        before = await _count_before(client, user_id, cube) if wait else 0
        marks = await mark(client) if wait else {}
        token = await client.publish(CONVERSATIONS, chunk)
        if not wait:
            console.print(f"published document '{name}' ({plural(len(text), 'character')}) "
                          f"to cube '{cube}'")
            return
        with console.status("extracting the document…"):
            await client.wait_applied(token, timeout=600)
        await _raise_if_refused(client, [token])
        after = await count_memories(client, user_id, cube, True)
        added = await added_since(client, marks, cube) if after > (before or 0) else None
    if added is not None:
        console.print(f"added document '{name}' to cube '{cube}': {added.describe()}")
    else:
        console.print(f"nothing new: document '{name}' was already in cube '{cube}'")


def parse_filter(filter_json: str | None, session_id: str | None) -> dict[str, Any] | None:
    """``--filter`` JSON and ``--session`` as one search filter."""
    result: dict[str, Any] = {}
    if filter_json is not None:
        try:
            parsed = json.loads(filter_json)
        except json.JSONDecodeError as exc:
            raise InputError(f"--filter: not JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(parsed, dict):
            raise InputError('--filter: expected a JSON object such as {"tags": '
                             '{"contains": "food"}}')
        result.update(parsed)
    if session_id is not None:
        result["session_id"] = session_id
    return result or None


def node_json(item: MemoryItem, score: float | None = None) -> dict[str, Any]:
    data: dict[str, Any] = item.model_dump(mode="json")
    if score is not None:
        data = {"score": score, **data}
    return data


def short_date(item: MemoryItem) -> str:
    return item.metadata.updated_at.strftime("%Y-%m-%d %H:%M")


def ended(item: MemoryItem) -> str:
    """"held until 2026-11-28, replaced by e6489155" for a memory that stopped holding (a
    later statement closed it, or feedback called it outdated); "" while it holds."""
    md = item.metadata
    if md.valid_until is None:
        return ""
    by = f", replaced by {md.superseded_by[:8]}" if md.superseded_by else ""
    return f"held until {md.valid_until:%Y-%m-%d}{by}"


WIDE = 120  # below this many columns, one block per memory instead of a table


def print_nodes(console: Console, rows: list[tuple[MemoryItem, float | None]],
                title: str) -> None:
    """Memories with their ids and dates: a table on a wide terminal, else one block each;
    the text always wraps, never cut (Chinese has no spaces to wrap at)."""
    scored = any(score is not None for _, score in rows)
    several = len({item.metadata.cube_id for item, _ in rows}) > 1  # say which cube
    if console.width < WIDE:
        console.print(title, style="bold")
        for i, (item, score) in enumerate(rows, 1):
            md = item.metadata
            head = Text(f"{i}. ", style="bold")
            if score is not None:
                head.append(f"{score:.3f}  ")
            status = "" if md.status == "activated" else f" ({md.status})"
            head.append(f"{md.memory_type}{status}  {short_date(item)}", style="cyan")
            if several:
                head.append(f"  cube {md.cube_id}")
            console.print(head)
            console.print(Padding(Text(f"id {item.id}", style="dim"), (0, 0, 0, 3)))
            console.print(Padding(Text(item.memory, overflow="fold"), (0, 0, 0, 3)))
            if until := ended(item):
                console.print(Padding(Text(until, style="yellow"), (0, 0, 0, 3)))
            if md.tags:
                console.print(Padding(Text("tags: " + ", ".join(md.tags), style="dim"),
                                      (0, 0, 0, 3)))
        return
    table = Table("id", "updated", *(["score"] if scored else []), *(["cube"] if several else []),
                  "type", "memory", "tags", title=title, expand=True)
    for column in table.columns:
        column.no_wrap = column.header in ("id", "updated", "score", "type", "cube")
    memory = next(c for c in table.columns if c.header == "memory")
    memory.overflow, memory.ratio = "fold", 3
    tags = table.columns[-1]
    tags.overflow, tags.ratio = "fold", 1
    for item, score in rows:
        md = item.metadata
        table.add_row(item.id, short_date(item), *([f"{score:.3f}"] if scored else []),
                      *([md.cube_id] if several else []),
                      md.memory_type + ("" if md.status == "activated" else f" ({md.status})"),
                      item.memory + (f"\n({until})" if (until := ended(item)) else ""),
                      ", ".join(md.tags))
    console.print(table)


async def search_table(settings: Settings, console: Console, query: str, user_id: str,
                       cube_ids: Sequence[str], top_k: int, mode: str, memory_type: str,
                       search_filter: dict[str, Any] | None = None,
                       as_json: bool = False, min_score: float = 0.0) -> None:
    """``cube_ids``: the cubes searched as one (none: the user's own)."""
    async with MemoryClient(settings) as client:
        found = await client.search(user_id, query, cube_ids=cube_ids, top_k=top_k,
                                    mode=mode,  # type: ignore[arg-type]
                                    memory_type=memory_type,  # type: ignore[arg-type]
                                    search_filter=search_filter, min_score=min_score)
    if as_json:
        print(json.dumps([node_json(s.item, s.score) for s in found], ensure_ascii=False,
                         indent=2))
        return
    if not found:
        below = f" scoring {min_score:g} or more" if min_score > 0 else ""
        where = ", ".join(f"'{c}'" for c in cube_ids or [user_id])
        console.print(f"no results{below} for {query!r} in cube{'s' if len(cube_ids) > 1 else ''} "
                      f"{where}")
        return
    print_nodes(console, [(s.item, s.score) for s in found],
                f"{plural(len(found), 'result')} for {query!r}")


async def context_block(settings: Settings, query: str, user_id: str,
                        cube_ids: Sequence[str], budget: int, unit: Unit, as_json: bool) -> None:
    """Print the context block for ``query``: plain text (its ``[time]`` lines are not
    markup), or with ``--json`` the text, the ids and what did not fit."""
    async with MemoryClient(settings) as client:
        block = await client.context(user_id, query, budget, cube_ids=cube_ids, unit=unit)
    if as_json:
        print(json.dumps({**block.model_dump(mode="json"), "ids": list(block.ids)},
                         ensure_ascii=False, indent=2))
        return
    if block.text:
        click.echo(block.text)
    else:  # not even the line saying what did not fit: say it where the block is not read
        click.echo(f"nothing fits in {budget} {'characters' if unit == 'chars' else 'tokens'}"
                   f" ({plural(block.left_out, 'memory', 'memories')} found)", err=True)


async def dump_or_load(settings: Settings, console: Console, what: str, path: Path,
                       user_id: str, cube_id: str | None) -> None:
    """Ask the worker (which owns the stores) to dump or load, and wait until it has."""
    target = str(path.resolve())
    cube = cube_id or user_id
    async with MemoryClient(settings) as client:
        if what == "dump":
            if await count_memories(client, user_id, cube, include_inactive=True) == 0:
                raise InputError(f"cube '{cube}' has no memories; nothing was written")
            token = await client.command(DumpCube(user_id=user_id, cube_id=cube, path=target))
        else:
            token = await client.command(LoadCube(user_id=user_id, cube_id=cube, path=target))
        with console.status(f"waiting for the worker to {what} …"):
            await client.wait_applied(token, timeout=600)
        failure = await client.command_failure(token)
    if failure is not None:
        raise RuntimeError(f"{what} failed: {failure}")
    if what == "dump":
        info = TypeAdapter(dict[str, Any]).validate_json(path.read_bytes())
        nodes = info.get("nodes", [])
        copies = sum(1 for n in nodes
                     if n.get("metadata", {}).get("memory_type") == "WorkingMemory")
        extra = f" (and {plural(copies, 'working-memory copy', 'working-memory copies')})" \
            if copies else ""
        console.print(f"dumped {plural(len(nodes) - copies, 'memory', 'memories')}{extra} and "
                      f"{plural(len(info.get('edges', [])), 'edge')} to {path}")
    else:
        console.print(f"loaded {path} into cube '{cube}'")

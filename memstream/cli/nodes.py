"""CLI commands on single memories and on the operator's queues: get, list, update, feedback,
delete, dead-letters (inspect and re-drive) and backup. Each is a thin layer over the client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import click
from rich.table import Table

from memstream.cli.actions import count_memories, node_json, plural, print_nodes
from memstream.cli.common import (
    apply_command,
    console,
    cube_option,
    data_dir_option,
    json_option,
    print_json,
    run_async,
    settings_for,
    user_option,
)
from memstream.cli.erase import carry_out, plan_erasure, print_checks
from memstream.cli.errors import InputError, not_empty
from memstream.cli.log import backup_every_cube
from memstream.cli.writes import resolve_ids
from memstream.client.client import MemoryClient
from memstream.history.ids import stored
from memstream.topics.events import BackupCube, DeadLetter, DeleteNodes, Feedback, UpdateNode
from memstream.topics.models import VERDICTS, MemoryItem, MemoryType
from memstream.topics.settings import Settings

TYPES = ["LongTermMemory", "UserMemory", "EpisodicMemory", "WorkingMemory"]


@click.command()
@click.argument("ids", nargs=-1, required=True, callback=not_empty)
@user_option
@cube_option
@json_option
@data_dir_option
def get(ids: tuple[str, ...], user_id: str, cube_id: str | None, as_json: bool,
        data_dir: Path | None) -> None:
    """Show the memories with these IDS, or their first 8+ characters (with sources and
    dates)."""
    run_async(_get(settings_for(data_dir), ids, user_id, cube_id, as_json))


async def _get(settings: Settings, ids: tuple[str, ...], user_id: str, cube_id: str | None,
               as_json: bool) -> None:
    async with MemoryClient(settings) as client:
        resolved = await stored(client, user_id, cube_id or user_id, ids)  # prefixes too
    nodes = resolved.nodes
    if as_json:
        print_json([node_json(n) for n in nodes])
    else:
        for n in nodes:
            md = n.metadata
            table = Table(show_header=False, title=n.id)
            for name, value in (
                ("memory", n.memory), ("type", f"{md.memory_type} / {md.type} / "
                                               f"{md.hierarchy_level}"),
                ("status", md.status + (" (frozen)" if md.frozen else "")),
                *((("feedback", md.feedback),) if md.feedback else ()),
                *((("valid from", md.valid_from.isoformat()),) if md.valid_from else ()),
                *((("valid until", md.valid_until.isoformat()),) if md.valid_until else ()),
                *((("replaced by", md.superseded_by),) if md.superseded_by else ()),
                ("key", md.key),
                ("tags", ", ".join(md.tags)), ("session", md.session_id or ""),
                ("created", md.created_at.isoformat()), ("updated", md.updated_at.isoformat()),
                ("sources", "; ".join(_source(s.model_dump(exclude_none=True))
                                      for s in md.sources)),
            ):
                table.add_row(name, value)
            console.print(table)
    resolved.require()  # after showing what was found: an unknown id exits 2


def _source(ref: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in ref.items())


@click.command(name="list")
@user_option
@cube_option
@click.option("--type", "memory_type", type=click.Choice(TYPES), default=None,
              help="Only this memory type (default: all but working-memory copies).")
@click.option("--all", "include_inactive", is_flag=True,
              help="Include archived and merged memories.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@data_dir_option
def list_(user_id: str, cube_id: str | None, memory_type: str | None, include_inactive: bool,
          limit: int, as_json: bool, data_dir: Path | None) -> None:
    """List a cube's memories, newest first."""
    run_async(_list(settings_for(data_dir), user_id, cube_id, memory_type, include_inactive, limit,
               as_json))


async def _list(settings: Settings, user_id: str, cube_id: str | None, memory_type: str | None,
                include_inactive: bool, limit: int, as_json: bool) -> None:
    cube = cube_id or user_id
    types = [memory_type] if memory_type else TYPES[:3]
    nodes: list[MemoryItem] = []
    total = 0
    async with MemoryClient(settings) as client:
        for t in types:
            page = await client.get_all_page(user_id, cube, cast(MemoryType, t),
                                             include_inactive, limit=1)
            total += page.total or 0
            if len(nodes) < limit:
                nodes += await client.get_all(user_id, cube, cast(MemoryType, t),
                                              include_inactive, limit=limit - len(nodes))
    nodes.sort(key=lambda n: n.metadata.updated_at, reverse=True)
    if as_json:
        print_json({"cube_id": cube, "total": total, "nodes": [node_json(n) for n in nodes]})
        return
    shown = f"{len(nodes):,} of {plural(total, 'memory', 'memories')}" if total > len(nodes) \
        else plural(total, "memory", "memories")
    print_nodes(console, [(n, None) for n in nodes], f"cube '{cube}': {shown}")


@click.command()
@click.argument("node_id", callback=not_empty)
@user_option
@cube_option
@click.option("--text", "memory", default=None, callback=not_empty, help="New memory text.")
@click.option("--key", default=None, help="New key (short title).")
@click.option("--tags", default=None, help="New tags, comma-separated (replaces the old).")
@click.option("--status", type=click.Choice(["activated", "archived"]), default=None)
@click.option("--freeze/--unfreeze", "frozen", default=None,
              help="Freeze (no changes or merges) or unfreeze.")
@data_dir_option
def update(node_id: str, user_id: str, cube_id: str | None, memory: str | None,
           key: str | None, tags: str | None, status: str | None, frozen: bool | None,
           data_dir: Path | None) -> None:
    """Change a memory's text, key, tags, status or frozen flag."""
    if all(v is None for v in (memory, key, tags, status, frozen)):
        raise click.UsageError("nothing to change: give --text, --key, --tags, --status or "
                               "--freeze/--unfreeze")
    settings = settings_for(data_dir)
    tag_list = tuple(t.strip() for t in tags.split(",") if t.strip()) if tags is not None \
        else None
    cube = cube_id or user_id

    async def _update() -> str:
        (full_id,) = await resolve_ids(settings, (node_id,), user_id, cube, "updated")
        event = UpdateNode(user_id=user_id, cube_id=cube, node_id=full_id,
                           memory=memory, key=key, tags=tag_list,
                           status=status, frozen=frozen)  # type: ignore[arg-type]
        await apply_command(settings, event, "update")
        return full_id

    console.print(f"updated {run_async(_update())}")


@click.command()
@click.argument("node_id", metavar="ID", callback=not_empty)
@click.argument("verdict", metavar="VERDICT", type=click.Choice(VERDICTS))
@user_option
@cube_option
@click.option("--note", default="", help="Why, in a sentence (history and explain show it).")
@click.option("--query", default=None, callback=not_empty,
              help="The query it was returned for: irrelevant ranks it lower for similar ones.")
@data_dir_option
def feedback(node_id: str, verdict: str, user_id: str, cube_id: str | None, note: str,
             query: str | None, data_dir: Path | None) -> None:
    """Say what memory ID (or its first 8+ characters) was worth. VERDICT: wrong (never
    returned again, kept in its history), outdated (no longer holds: it leaves working
    memory), irrelevant (ranked lower for queries like --query) or confirmed (true: nothing
    closes it automatically)."""
    settings = settings_for(data_dir)
    cube = cube_id or user_id

    async def _feedback() -> str:
        (full_id,) = await resolve_ids(settings, (node_id,), user_id, cube, "changed")
        event = Feedback(user_id=user_id, cube_id=cube, node_id=full_id,
                         verdict=verdict, note=note, query=query)  # type: ignore[arg-type]
        await apply_command(settings, event, "feedback")
        return full_id

    console.print(f"{run_async(_feedback())}: {verdict}" + (f" ({note})" if note else ""))
    if verdict == "irrelevant" and query is None:
        console.print("without --query it is ranked lower for no query; the verdict is kept")


@click.command()
@click.argument("ids", nargs=-1, required=True, callback=not_empty)
@user_option
@cube_option
@data_dir_option
def delete(ids: tuple[str, ...], user_id: str, cube_id: str | None,
           data_dir: Path | None) -> None:
    """Delete the memories with these IDS (and their working-memory copies)."""
    run_async(_delete(settings_for(data_dir), ids, user_id, cube_id or user_id))


async def _delete(settings: Settings, ids: tuple[str, ...], user_id: str, cube: str) -> None:
    full_ids = await resolve_ids(settings, ids, user_id, cube, "deleted")
    await apply_command(settings, DeleteNodes(user_id=user_id, cube_id=cube, node_ids=full_ids),
                        "delete")
    console.print(f"deleted {plural(len(full_ids), 'memory', 'memories')} from cube '{cube}'")


@click.group(name="dead-letters", invoke_without_command=True)
@click.option("--stage", default=None, help="Only letters of this stage.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@data_dir_option
@click.pass_context
def dead_letters(ctx: click.Context, stage: str | None, limit: int, as_json: bool,
                 data_dir: Path | None) -> None:
    """Events that failed (newest last); `dead-letters redrive` publishes them again."""
    if ctx.invoked_subcommand is None:
        run_async(_letters(settings_for(data_dir), stage, limit, as_json))


async def _all_letters(settings: Settings, stage: str | None) -> list[DeadLetter]:
    async with MemoryClient(settings) as client:
        letters = [e for e in await client.history("dead-letter")
                   if isinstance(e, DeadLetter)]
    letters = [d for d in letters if stage is None or d.stage == stage]
    return sorted(letters, key=lambda d: d.occurred_at)


def _where(d: DeadLetter) -> str:
    return f"{d.original_topic}:{d.original_partition}:{d.original_offset}"


async def _letters(settings: Settings, stage: str | None, limit: int, as_json: bool) -> None:
    letters = await _all_letters(settings, stage)
    shown = letters[-limit:]
    if not as_json and not letters:
        console.print("no dead letters" + (f" of stage {stage}" if stage else ""))
        return
    if as_json:
        print_json({"total": len(letters),
                     "letters": [d.model_dump(mode="json") for d in shown]})
        return
    table = Table("when", "stage", "original (topic:partition:offset)", "error",
                  title=f"{plural(len(letters), 'dead letter')}"
                        + (f", newest {len(shown)} shown" if len(shown) < len(letters) else ""))
    table.columns[3].overflow = "fold"
    table.columns[3].ratio = 1
    for d in shown:
        table.add_row(d.occurred_at.strftime("%Y-%m-%d %H:%M:%S"), d.stage, _where(d), d.error)
    console.print(table)


@dead_letters.command()
@click.argument("where", nargs=-1)
@click.option("--stage", default=None, help="Re-drive every letter of this stage.")
@click.option("--all", "everything", is_flag=True, help="Re-drive every dead letter.")
@data_dir_option
def redrive(where: tuple[str, ...], stage: str | None, everything: bool,
            data_dir: Path | None) -> None:
    """Publish failed events again to their original topic.

    WHERE names letters as topic:partition:offset (as `dead-letters` shows them). A letter
    that fails again is dead-lettered again; re-driving is for after the cause was fixed.
    """
    if not (where or stage or everything):
        raise click.UsageError("name letters (topic:partition:offset), or give --stage or --all")
    run_async(_redrive(settings_for(data_dir), set(where), stage))


async def _redrive(settings: Settings, where: set[str], stage: str | None) -> None:
    letters = await _all_letters(settings, stage)
    chosen = [d for d in letters if not where or _where(d) in where]
    unknown = where - {_where(d) for d in letters}
    if unknown:
        raise InputError(f"no dead letter at {', '.join(sorted(unknown))}")
    async with MemoryClient(settings) as client:
        for d in chosen:
            token = await client.redrive(d)
            console.print(f"re-drove {_where(d)} → {token.topic}:{token.partition}:"
                          f"{token.offset}")
    console.print(f"re-drove {plural(len(chosen), 'dead letter')}")


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--user", "user_id", default=None, callback=not_empty,
              help="Back up this user's cube (with --cube: that cube). Default: every cube "
                   "holding memories.")
@click.option("--cube", "cube_id", default=None, callback=not_empty,
              help="The memory cube (default: the user id).")
@click.option("--keep", "--keep-last", "keep_last", default=3, show_default=True,
              type=click.IntRange(1, 1000),
              help="Backups of each cube kept in DIRECTORY (older ones are deleted).")
@click.option("--drop", is_flag=True,
              help="Erase the cube everywhere after the backup, as `memstream erase` does, "
                   "and check it (needs --user).")
@data_dir_option
def backup(directory: Path, user_id: str | None, cube_id: str | None, keep_last: int,
           drop: bool, data_dir: Path | None) -> None:
    """Write timestamped dumps of cubes into DIRECTORY (done by the worker); `memstream
    restore DIRECTORY` loads the newest of each back."""
    if user_id is None and (cube_id is not None or drop):
        raise click.UsageError("--cube and --drop need --user")
    if user_id is None:
        backup_every_cube(directory, keep_last, data_dir)
        return
    run_async(_backup(settings_for(data_dir), directory.resolve(), user_id, cube_id or user_id,
                 keep_last, drop))


async def _backup(settings: Settings, directory: Path, user_id: str, cube: str, keep: int,
                  drop: bool) -> None:
    async with MemoryClient(settings) as client:
        if await count_memories(client, user_id, cube, include_inactive=True) == 0:
            raise InputError(f"cube '{cube}' has no memories; no backup written")
    event = BackupCube(user_id=user_id, cube_id=cube, directory=str(directory),
                       keep_last=keep, drop=drop)
    checks = None
    if drop:  # the whole erasure after the backup, checked as `memstream erase` checks it
        plan = await plan_erasure(settings, user_id, cube)
        checks = await carry_out(plan, {cube: event}, skip=[directory])
    else:
        await apply_command(settings, event, "back up")
    from memstream.sinks.dump import list_backups

    files = list_backups(directory, cube) if directory.is_dir() else []
    newest = files[-1] if files else directory
    info = json.loads(newest.read_text(encoding="utf-8")) if newest.is_file() else {}
    nodes = [n for n in info.get("nodes", [])
             if n.get("metadata", {}).get("memory_type") != "WorkingMemory"]
    console.print(f"backed up cube '{cube}' to {newest}: "
                  f"{plural(len(nodes), 'memory', 'memories')}"
                  + (", then erased it everywhere:" if drop else ""))
    if checks is None:
        return
    failed = print_checks(checks)
    click.echo(f"left behind: {directory} holds the cube's backups in plain JSON (they are "
               "what `memstream restore` loads); delete them to erase the cube from there too")
    if failed:
        raise click.ClickException(f"erasure after the backup not verified: "
                                   f"{plural(failed, 'check')} failed (above)")

"""CLI commands that read the log or act on a memory's lifecycle: ``history``, ``as-of``,
``explain``, ``freeze`` / ``unfreeze``, ``sweep``, ``backup`` / ``restore``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from memstream.cli.common import (
    apply_command,
    console,
    cube_option,
    data_dir_option,
    run_async,
    settings_for,
    user_option,
)
from memstream.cli.writes import resolve_ids
from memstream.client.client import MemoryClient
from memstream.history.provenance import Change, Explanation, History, live_ids, read_updates
from memstream.topics.events import (
    BackupCube,
    ExtractedMemory,
    FreezeNodes,
    LifecycleSweep,
    LoadCube,
    UnfreezeNodes,
)


def _time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time "
                                 "(e.g. 2026-05-01T12:00:00+00:00)") from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _short(text: str, width: int = 90) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _cause(change: Change) -> str:
    event = change.cause
    if event is None:
        return "-"
    what = getattr(event, "command", None) or getattr(event, "op", None) or type(event).__name__
    detail = event.memory if isinstance(event, ExtractedMemory) else ""
    return _short(f"{change.cause_topic}: {what} {detail}".strip(), 60)


@click.command()
@click.argument("node_id")
@cube_option
@data_dir_option
def history(node_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Every change of memory NODE_ID (or its first 8+ characters), oldest first, with the
    event that caused it. For a working-memory copy: the copy's changes and those of the
    memory it copies."""
    async def run() -> list[Change]:
        async with MemoryClient(settings_for(data_dir)) as client:
            return await client.memory_history(node_id, cube_id)

    changes = run_async(run())
    full, copy_of = (changes.node_id, changes.copy_of) if isinstance(changes, History) \
        else (node_id, None)
    what = f"{full}, a working-memory copy of {copy_of}" if copy_of else full
    table = Table("time (UTC)", "action", "stage", "memory / reason", "caused by",
                  title=f"history of {what} ({_count(len(changes), 'change', 'changes')})")
    for c in changes:
        u = c.update
        text = u.node.memory if u.node is not None and u.node_id in (full, copy_of) else ""
        detail = " — ".join(x for x in (_short(text, 60), _short(u.reason, 60)) if x)
        table.add_row(f"{u.occurred_at:%Y-%m-%d %H:%M:%S}", u.action, u.stage, escape(detail),
                      escape(_cause(c)))
    console.print(table)


@click.command("as-of")
@click.argument("time")
@user_option
@cube_option
@click.option("--status", "statuses", multiple=True,
              help="Only these statuses (repeatable; default: all).")
@click.option("--valid", is_flag=True,
              help="TIME is in the conversation's time: the memories that held then (begun, "
                   "not yet closed by a later statement or feedback), as the cube knows them "
                   "now.")
@data_dir_option
def as_of(time: str, user_id: str, cube_id: str | None, statuses: Sequence[str], valid: bool,
          data_dir: Path | None) -> None:
    """What a cube held at TIME (ISO 8601; UTC if no zone), rebuilt from memory.updates."""
    at = _time(time)
    cube = cube_id or user_id

    async def run() -> list[Any]:
        async with MemoryClient(settings_for(data_dir)) as client:
            return await client.as_of(cube, at, time="valid" if valid else "recorded")

    nodes = [n for n in run_async(run()) if not statuses or n.metadata.status in statuses]
    held = "held true" if valid else "held"
    if not nodes:
        console.print(f"cube '{cube}': no memories {held} at {at.isoformat()}")
        return
    table = Table("id", "type", "status", "valid", "memory",
                  title=f"cube '{cube}' at {at.isoformat()}"
                        f"{' (conversation time)' if valid else ''}: {len(nodes)} memories")
    for n in nodes:
        md = n.metadata
        status = md.status + (" (frozen)" if md.frozen else "")
        table.add_row(n.id[:8], md.memory_type, status, _validity(md), escape(_short(n.memory)))
    console.print(table)


def _validity(md: Any) -> str:
    """"since … until …" in dates, or "" when nothing is known."""
    since = f"since {md.valid_from:%Y-%m-%d}" if md.valid_from else ""
    until = f"until {md.valid_until:%Y-%m-%d}" if md.valid_until else ""
    return " ".join(x for x in (since, until) if x)


_LABELS = {"episode": "said in", "copy": "a working-memory copy of"}


def _print_explanation(exp: Explanation, indent: int = 0) -> None:
    pad = "  " * indent
    node = exp.node
    head = escape(_short(node.memory, 100)) if node is not None else "(not in the log)"
    status = escape(f" [{node.metadata.status}]") if node is not None else ""
    kind = f" ({node.metadata.hierarchy_level})" if node is not None and \
        node.metadata.hierarchy_level != "fact" else ""
    console.print(f"{pad}[bold]{exp.node_id[:8]}[/bold]{status}{kind} {head}")
    if (said := exp.feedback) is not None:  # the agents' last verdict, and why
        console.print(f"{pad}  feedback at {said.update.occurred_at:%Y-%m-%d %H:%M}: "
                      f"{escape(_short(said.update.reason, 100))}")
    if (made := exp.made) is not None and not exp.sources:  # derived: which stage made it
        u = made.update
        why = f": {escape(_short(u.reason, 80))}" if u.reason else ""
        console.print(f"{pad}  made by the {u.stage} stage at {u.occurred_at:%Y-%m-%d %H:%M}"
                      f"{why}")
    for s in exp.sources:
        when = f"{s.timestamp:%Y-%m-%d %H:%M} " if s.timestamp else ""
        who = s.name or s.role or s.kind
        console.print(f"{pad}  ← {s.kind} {when}{escape(who)}: {escape(_short(s.text, 100))}")
    members: dict[str, list[Explanation]] = {}  # a summary's, by the edges that say so
    for step in exp.lineage:
        if step.kind == "member":
            members.setdefault(step.reason, []).append(step.source)
            continue
        why = escape(_short(step.reason, 80))
        console.print(f"{pad}  {_LABELS.get(step.kind) or f'{step.kind} from ({why})'}:")
        _print_explanation(step.source, indent + 2)
    for why, sources in members.items():
        console.print(f"{pad}  summarizes {_count(len(sources), 'memory', 'memories')} "
                      f"({escape(_short(why, 80))}):")
        for source in sources:
            _print_explanation(source, indent + 2)


@click.command()
@click.argument("node_id")
@cube_option
@data_dir_option
def explain(node_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Why a cube holds NODE_ID (or its first 8+ characters): its source messages and the
    merges and inferences behind it; for a summary, the stage that made it and its members;
    for a working-memory copy, the memory it copies."""
    async def run() -> Explanation:
        async with MemoryClient(settings_for(data_dir)) as client:
            return await client.explain(node_id, cube_id)

    _print_explanation(run_async(run()))


def _freeze_command(frozen: bool) -> click.Command:
    name = "freeze" if frozen else "unfreeze"

    @click.command(name, help=(
        "Freeze NODE_IDS (or their first 8+ characters): never merged, updated, archived or "
        "expired (compliance hold)." if frozen else
        "Unfreeze NODE_IDS (or their first 8+ characters): lifecycle and merges apply to "
        "them again."))
    @click.argument("node_ids", nargs=-1, required=True)
    @user_option
    @cube_option
    @click.option("--reason", default="", help="Why (kept in memory.updates).")
    @data_dir_option
    def command(node_ids: tuple[str, ...], user_id: str, cube_id: str | None, reason: str,
                data_dir: Path | None) -> None:
        kind = FreezeNodes if frozen else UnfreezeNodes
        settings, cube = settings_for(data_dir), cube_id or user_id

        async def apply() -> int:
            full = await resolve_ids(settings, node_ids, user_id, cube,
                                     "frozen" if frozen else "unfrozen")
            await apply_command(settings, kind(user_id=user_id, cube_id=cube, node_ids=full,
                                               reason=reason), name)
            return len(full)

        done = run_async(apply())
        console.print(f"{'froze' if frozen else 'unfroze'} {_count(done, 'memory', 'memories')}"
                      f" in cube '{cube}'")

    return command


freeze = _freeze_command(True)
unfreeze = _freeze_command(False)


@click.command()
@user_option
@cube_option
@data_dir_option
def sweep(user_id: str, cube_id: str | None, data_dir: Path | None) -> None:
    """Run the lifecycle sweep of a cube now (archive unused, expire long-archived memories)."""
    cube = cube_id or user_id
    run_async(apply_command(settings_for(data_dir),
                            LifecycleSweep(user_id=user_id, cube_id=cube), "sweep"))
    console.print(f"swept cube '{cube}'")


async def _cubes_with_memories(client: MemoryClient) -> dict[str, str]:
    """Each cube holding memories, with its owner: the user of its first readable update (its
    first writer, whom the worker made the owner; a cube loaded with ``load --cube`` belongs
    to the loading user, not to a user named like the cube)."""
    by_cube: dict[str, list[Any]] = {}
    owners: dict[str, str] = {}
    for u in await read_updates(client, None):
        by_cube.setdefault(u.cube_id, []).append(u)
        owners.setdefault(u.cube_id, u.user_id)
    return {c: owners[c] for c, updates in sorted(by_cube.items()) if live_ids(updates)}


def backup_every_cube(directory: Path, keep_last: int, data_dir: Path | None) -> None:
    """``memstream backup DIRECTORY`` without --user: every cube holding memories, keeping
    the last ``keep_last`` backups of each (the worker writes the files), each asked for as
    the cube's owner."""
    target = str(directory.resolve())

    async def run() -> list[str]:
        async with MemoryClient(settings_for(data_dir)) as client:
            owners = await _cubes_with_memories(client)
            cubes = list(owners)
            tokens = [await client.command(BackupCube(user_id=owners[c], cube_id=c,
                                                      directory=target, keep_last=keep_last,
                                                      drop=False))
                      for c in cubes]
            with console.status(f"waiting for the worker to back up {len(cubes)} cubes …"):
                for token in tokens:
                    await client.wait_applied(token, timeout=600)
            for cube, token in zip(cubes, tokens, strict=True):
                if (failure := await client.command_failure(token)) is not None:
                    raise RuntimeError(f"backup of cube {cube!r} failed: {failure}")
            return cubes

    cubes = run_async(run())
    console.print(f"backed up {_count(len(cubes), 'cube', 'cubes')} to {directory}: "
                  f"{', '.join(cubes) or '-'}")


def latest_backups(directory: Path) -> dict[str, tuple[Path, str]]:
    """The newest backup file of each cube in ``directory`` and the owner it recorded (the
    cube id for backups written before owners were recorded)."""
    from memstream.sinks.dump import list_backups

    cubes: dict[str, tuple[Path, str]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            with path.open(encoding="utf-8") as fh:
                cube = json.load(fh).get("cube_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(cube, str) and cube not in cubes:
            newest = list_backups(directory, cube)
            chosen = newest[-1] if newest else path
            cubes[cube] = (chosen, _owner_in(chosen) or cube)
    return cubes


def _owner_in(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8") as fh:
            owner = json.load(fh).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) and owner else None


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--cube", "cube_ids", multiple=True, help="Restore only these cubes.")
@data_dir_option
def restore(directory: Path, cube_ids: Sequence[str], data_dir: Path | None) -> None:
    """Load the newest backup of each cube in DIRECTORY (written by `memstream backup`)."""
    found = latest_backups(directory)
    chosen = {c: p for c, p in found.items() if not cube_ids or c in cube_ids}
    if not chosen:
        raise click.ClickException(f"no memstream backups in {directory}")

    async def run() -> None:
        async with MemoryClient(settings_for(data_dir)) as client:
            tokens = [(c, await client.command(LoadCube(user_id=owner, cube_id=c,
                                                        path=str(p.resolve()))))
                      for c, (p, owner) in sorted(chosen.items())]
            with console.status(f"waiting for the worker to load {len(tokens)} cubes …"):
                for _, token in tokens:
                    await client.wait_applied(token, timeout=600)
            for cube, token in tokens:
                if (failure := await client.command_failure(token)) is not None:
                    raise RuntimeError(f"restore of cube {cube!r} failed: {failure}")

    run_async(run())
    for cube, (path, _) in sorted(chosen.items()):
        console.print(f"restored cube '{cube}' from {path.name}")

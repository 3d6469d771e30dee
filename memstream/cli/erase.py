"""``memstream erase``: a cube erased everywhere memstream keeps it, then checked.

The worker carries out the erasure (``delete_cube``, docs/erasure.md): graph and vectors and
their files, the embedding cache, working memory, the cube's data key. This command samples
a few of the cube's texts first, waits until the erasure is applied, then looks for itself —
in the graph, through the worker, in the key directory, in every topic read back with the
keys that remain, in every file under the data directory — and prints one line per check.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from memstream.cli.actions import plural
from memstream.cli.common import console, data_dir_option, run_async, settings_for
from memstream.cli.erase_checks import (
    CubeLog,
    FileScan,
    key_files_with,
    kid_of,
    read_log,
    sample_probes,
    scan_files,
)
from memstream.cli.errors import InputError, not_empty
from memstream.client.client import ClientError, MemoryClient, MemoryServiceError
from memstream.security.keys import Keyring
from memstream.sinks.ports import GraphStore
from memstream.topics.events import DeleteCube, Event
from memstream.topics.models import MemoryType
from memstream.topics.settings import Settings

TEXT_TYPES: tuple[MemoryType, ...] = ("EpisodicMemory", "UserMemory", "LongTermMemory")
# What the worker's announcement of an erasure says it removed and counted afterwards
# (``streams/commands/logic.py``, ``Erased.describe``).
_ERASED = re.compile(r"(\d+) nodes, (\d+) vectors, (\d+) cached embeddings"
                     r"(?:, its data key destroyed)?; left: (\d+) nodes, (\d+) vectors, "
                     r"(\d+) cached embeddings$")


@dataclass
class CubePlan:
    cube: str
    memories: int  # graph nodes but working-memory copies
    records: int  # in the log, every topic
    probes: list[str]  # never printed
    kid: str | None  # the id of its data key before the erasure


@dataclass
class Plan:
    settings: Settings
    user: str
    cubes: list[CubePlan]
    files_before: FileScan


@dataclass(frozen=True)
class Check:
    what: str
    ok: bool
    said: str

    def line(self) -> str:
        return f"  {'ok    ' if self.ok else 'FAILED'}  {self.what}: {self.said}"


async def _graph(settings: Settings) -> GraphStore:
    """The graph store the worker writes (as ``memstream ui`` opens it)."""
    from memstream.local.services import status as service_status
    from memstream.sinks.graph.factory import create_graph_store

    uri = settings.graph.uri or (await service_status(settings.data_dir)).graph
    if uri is None:
        raise click.ClickException(f"no graph store: nothing runs in {settings.data_dir}; run "
                                   "`memstream up` first or set MEMSTREAM_GRAPH__URI")
    return create_graph_store(settings, uri)


async def _owner(graph: GraphStore, cube: str, log: CubeLog | None) -> str | None:
    """The owner the worker recorded; for a cube without a record, the user of its first
    memory or its first record (as the worker's access check reads it)."""
    if (access := await graph.get_cube_access(cube)) is not None:
        return access.owner
    nodes = await graph.find_nodes(cube, limit=1)
    return nodes[0].metadata.user_id if nodes else (log.user if log else None)


async def plan_erasure(settings: Settings, user: str, cube: str | None) -> Plan:
    """What would be erased: the cube named, else every cube ``user`` owns that holds
    memories or readable records; and a few of each cube's texts, to look for afterwards."""
    graph = await _graph(settings)
    try:
        async with MemoryClient(settings) as client:
            logs = await read_log(settings, client.bootstrap, None if cube is None
                                  else {cube}, {}, sample=True)
        if cube is not None:
            owner = await _owner(graph, cube, logs.get(cube))
            if owner not in (None, user):
                raise InputError(f"cube '{cube}' is owned by '{owner}', not '{user}'; only "
                                 "its owner erases it")
            chosen = [cube]
        else:
            chosen = []
            for c in sorted(set(await graph.list_cubes()) | set(logs)):
                if await _owner(graph, c, logs.get(c)) == user:
                    chosen.append(c)
        keys = Keyring(settings.erasure_key_dir) if settings.erasure_key_dir else None
        plans = []
        for c in chosen:
            counts = await graph.count_by_type(c, status=None)
            memories = sum(n for t, n in counts.items() if t != "WorkingMemory")
            log = logs.get(c)
            if cube is None and not memories and not (log and log.source_readable):
                continue  # erased before (or never written): nothing left to erase
            texts = [(t, n.memory) for t in TEXT_TYPES
                     for n in await graph.all_of_type(c, t, status=None, limit=50)]
            plans.append(CubePlan(c, memories, log.records if log else 0,
                                  sample_probes([*texts, *(log.texts if log else [])]),
                                  kid_of(keys.get(c)) if keys else None))
    finally:
        await graph.close()
    probes = [p for plan in plans for p in plan.probes]
    files = await asyncio.to_thread(scan_files, settings.data_dir, probes)
    return Plan(settings, user, plans, files)


async def carry_out(plan: Plan, commands: dict[str, Event], skip: Sequence[Path] = ()
                    ) -> dict[str, list[Check]]:
    """Publish each cube's erasing command, wait until the worker applied it, then check;
    returns the checks of each cube."""
    settings = plan.settings
    failures: dict[str, str | None] = {}
    async with MemoryClient(settings) as client:
        tokens = {c: await client.command(e) for c, e in commands.items()}
        with console.status(f"waiting for the worker to erase {len(tokens)} "
                            f"cube{'s' if len(tokens) != 1 else ''} …"):
            for token in tokens.values():
                await client.wait_applied(token, timeout=600)
        for c, token in tokens.items():
            failures[c] = await client.command_failure(token)
        reads = {c: await _reads(client, plan.user, c) for c in commands}
        probes = {p.cube: p.probes for p in plan.cubes}
        logs = await read_log(settings, client.bootstrap, set(commands), probes)
    graph = await _graph(settings)
    try:
        stores = {c: await _graph_check(graph, c) for c in commands}
    finally:
        await graph.close()
    every = [p for c in plan.cubes for p in c.probes]
    files = await asyncio.to_thread(scan_files, settings.data_dir, every, skip)
    checks: dict[str, list[Check]] = {}
    for cube in plan.cubes:
        c, log = cube.cube, logs.get(cube.cube)
        event_id = commands[c].event_id
        said = log.erasures.get(event_id) if log else None
        checks[c] = [
            stores[c], *_worker_checks(c, failures[c], said), reads[c],
            _key_check(settings, cube, log), _log_check(settings, cube, log),
            _state_check(c, log),
            _file_check(settings.data_dir, cube, every, plan.files_before, files, skip)]
    return checks


def _worker_checks(cube: str, failure: str | None, said: str | None) -> list[Check]:
    if failure is not None:
        return [Check("worker", False, f"the erasure of cube '{cube}' failed: {failure}")]
    counted = _ERASED.search(said or "")
    if counted is None:
        return [Check("worker", False, f"the worker announced no erasure of cube '{cube}' "
                                       "with its counts (see `memstream dead-letters`)")]
    _, vectors, cached, _, vectors_left, cached_left = (int(g) for g in counted.groups())
    return [
        Check("vectors", vectors_left == 0,
              f"{vectors_left} of cube '{cube}' left, counted by the worker in its vector "
              f"store after the erasure ({vectors} removed)"),
        Check("embedding cache", cached_left == 0,
              f"{cached_left} entries of cube '{cube}' left, counted by the worker after "
              f"forgetting {cached}")]


async def _graph_check(graph: GraphStore, cube: str) -> Check:
    counts = await graph.count_by_type(cube, status=None)
    working = counts.get("WorkingMemory", 0)
    nodes = sum(counts.values())
    edges = len((await graph.export_cube(cube)).edges)
    return Check("graph", nodes == 0 and edges == 0,
                 f"{nodes} nodes ({nodes - working} memories, {working} working-memory "
                 f"entries) and {edges} edges of cube '{cube}', read from the graph store")


async def _reads(client: MemoryClient, user: str, cube: str) -> Check:
    """What the worker answers for the cube: through its caches, not around them."""
    try:
        page = await client.get_all_page(user, cube, None, include_inactive=True, limit=1)
    except MemoryServiceError as exc:
        if "has no memories" not in exc.message:
            return Check("reads", False, f"the worker could not be asked: {exc.message}")
        total = 0
    except ClientError as exc:
        return Check("reads", False, f"the worker could not be asked: {exc}")
    else:
        total = page.total or len(page.nodes)
    return Check("reads", total == 0,
                 f"the worker answers that cube '{cube}' holds {total} memories "
                 "(archived and working memory included)")


def _key_check(settings: Settings, cube: CubePlan, log: CubeLog | None) -> Check:
    directory = settings.erasure_key_dir
    if directory is None:
        return Check("keys", False, "erasure by key is off (MEMSTREAM_ERASURE__ENABLED, and a "
                                    "key dir every producer and worker shares): the log keeps "
                                    "the cube's text readable")
    if cube.kid is None:
        return Check("keys", True, f"cube '{cube.cube}' had no data key: nothing of it was "
                                   "sealed (the log check below says what it holds)")
    still = key_files_with(directory, cube.kid)
    new = kid_of(Keyring(directory).get(cube.cube))
    since = sum(n for k, n in (log.opened_with if log else {}).items() if k != cube.kid)
    later = f"; a new key ({new[:8]}…) seals the {plural(since, 'record')} written since" \
        if new is not None else ""
    if still:
        return Check("keys", False, f"the data key of cube '{cube.cube}' ({cube.kid[:8]}…) is "
                                    f"still in {', '.join(still)} under {directory}")
    return Check("keys", True, f"the data key of cube '{cube.cube}' ({cube.kid[:8]}…) is in "
                               f"no file under {directory}{later}")


def _log_check(settings: Settings, cube: CubePlan, log: CubeLog | None) -> Check:
    if log is None:
        return Check("log", True, f"no record of cube '{cube.cube}' in any topic")
    old = log.opened_with.get(cube.kid, 0) if cube.kid else 0
    problems = []
    if settings.erasure_key_dir is None and log.plain:
        problems.append(f"{plural(log.plain, 'record')} not sealed, which no key destruction "
                        "reaches")
    if old:
        problems.append(f"{plural(old, 'record')} sealed with its old key still open")
    if log.holding:
        problems.append(f"{plural(log.holding, 'record')} still holding a sampled text")
    head = f"{plural(log.records, 'record')} of cube '{cube.cube}' in " \
        f"{plural(len(log.topics), 'topic')}"
    if problems:
        return Check("log", False, f"{head}: {'; '.join(problems)}")
    return Check("log", True, f"{head}: {log.unreadable:,} sealed, none readable with the "
                              f"keys left; the {log.opened:,} sealed since and {log.plain:,} "
                              f"with nothing sealed hold none of the {len(cube.probes)} "
                              "sampled texts")


def _state_check(cube: str, log: CubeLog | None) -> Check:
    if log is None or not log.state:
        return Check("scheduler state", True, f"none kept for cube '{cube}'")
    opened = log.state - log.state_unreadable
    since = f"; {plural(opened, 'record')} written since" if opened else ""
    held = f", {log.state_holding} holding a sampled text" if log.state_holding else \
        (", holding none of the sampled texts" if opened else "")
    return Check("scheduler state", log.state_holding == 0,
                 f"{plural(log.state, 'record')} of cube '{cube}' in the changelog, "
                 f"{log.state_unreadable} unreadable{since}{held}")


def _file_check(root: Path, cube: CubePlan, every: list[str], before: FileScan,
                after: FileScan, skip: Sequence[Path]) -> Check:
    inside = [str(s) for s in skip if s.resolve().is_relative_to(root.resolve())]
    where = f"under {root}" + (f" (but {', '.join(inside)})" if inside else "")
    if not cube.probes:
        return Check("files", True, f"not checked: cube '{cube.cube}' held no text long "
                                    "enough to look for")
    mine = [i for i, p in enumerate(every) if p in cube.probes]
    left = after.found(mine)
    if left:
        return Check("files", False,
                     f"{plural(len(left), 'file')} {where} still "
                     f"{'holds' if len(left) == 1 else 'hold'} a sampled text of cube "
                     f"'{cube.cube}': {', '.join(sorted(left)[:5])}")
    held = len(before.found(mine))
    then = f"{plural(held, 'file')} held one before the erasure" if held else \
        "none held one before either: the stores keep their files elsewhere"
    return Check("files", True,
                 f"none of the {after.files:,} files ({after.size / 1e6:.1f} MB) {where} "
                 f"holds any of {len(cube.probes)} sampled texts of cube '{cube.cube}' "
                 f"({then})")


def print_checks(checks: dict[str, list[Check]]) -> int:
    """Every check, one line each; returns how many failed."""
    failed = 0
    for cube, lines in checks.items():
        click.echo(f"cube '{cube}':")
        for check in lines:
            click.echo(check.line())
            failed += not check.ok
    return failed


@click.command()
@click.option("--user", "user_id", required=True, callback=not_empty,
              help="The user whose cubes are erased.")
@click.option("--cube", "cube_id", default=None, callback=not_empty,
              help="Only this cube (default: every cube the user owns).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@data_dir_option
def erase(user_id: str, cube_id: str | None, yes: bool, data_dir: Path | None) -> None:
    """Erase a user's cubes for good, everywhere memstream keeps them, then check.

    Graph and vectors and their files, the embedding cache, working memory and scheduler
    state, and the log (the cube's data key is destroyed, so its records can no longer be
    read). Then each check is printed on a line; a failed check exits 1.
    """
    settings = settings_for(data_dir)
    plan = run_async(plan_erasure(settings, user_id, cube_id))
    if not plan.cubes:
        console.print(f"user '{user_id}' owns no cube holding memories or readable records: "
                      "nothing to erase")
        return
    for c in plan.cubes:
        click.echo(f"cube '{c.cube}': {plural(c.memories, 'memory', 'memories')}, "
                   f"{plural(c.records, 'log record')}")
    many = len(plan.cubes) != 1
    if not yes:
        click.confirm(f"Erase {'these cubes' if many else 'it'} for good (stores, files, log)? "
                      f"Nothing brings {'them' if many else 'it'} back", abort=True)
    commands: dict[str, Event] = {c.cube: DeleteCube(user_id=user_id, cube_id=c.cube)
                                  for c in plan.cubes}
    failed = print_checks(run_async(carry_out(plan, commands)))
    if failed:
        raise click.ClickException(f"erasure not verified: {plural(failed, 'check')} failed "
                                   "(above)")
    click.echo(f"erased {len(plan.cubes)} cube{'s' if many else ''} of user '{user_id}' "
               "and checked it")

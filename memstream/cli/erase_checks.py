"""What `memstream erase` looks at, before and after the worker erases a cube: the log read
back through a consumer, and the bytes of every file under the data directory.

Both look for *probes*: a run of a few of the cube's texts, sampled before the erasure,
that no store escapes when it writes them (no quotes, backslashes or control characters),
as UTF-8 and as JSON's ``\\u`` escapes. A probe is never printed: the checks report counts
and file names only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.archive.reading import archived, seek_past_archive
from memstream.kafka.compat import start_or_release, stop_within
from memstream.topics.legacy import MAGIC, PREFIX
from memstream.topics.sealing import is_sealed, key_id, unseal
from memstream.topics.settings import Settings

# Characters a store may escape or split a text at when it writes it (Cypher and JSON
# string escapes, line breaks): a probe never spans one.
_ESCAPED = re.compile(r"[\"'\\\x00-\x1f\u2028\u2029]+")
PROBE_CHARS = 48  # at most this much of a text is looked for
MIN_PROBE_BYTES = 16  # shorter runs are too common to tell a cube's text apart
SAMPLES = 3  # texts sampled per cube
CHUNK = 8 * 1024 * 1024
STALL_S = 30.0  # reading the log gives up after this long without a record
# The topics whose records are where a cube's text comes from: a cube whose records there
# still open holds text, even with no memory left in the graph.
SOURCE_TOPICS = ("conversations", "memory.items")
_KID = re.compile(rb'"kid":"([0-9a-f]{16})"')


def probe_of(text: str) -> str | None:
    """The longest run of ``text`` no store escapes, cut to ``PROBE_CHARS``; None when no run
    is long enough to be told apart from anyone's text."""
    runs = [r.strip() for r in _ESCAPED.split(text)]
    best = max(runs, key=len, default="")[:PROBE_CHARS].strip()
    return best if len(best.encode()) >= MIN_PROBE_BYTES else None


def sample_probes(texts: Iterable[tuple[str, str]], n: int = SAMPLES) -> list[str]:
    """Up to ``n`` probes from (kind, text) pairs, one kind after another (an episode, a
    fact, a message…), the longest probe of each kind first."""
    by_kind: dict[str, list[str]] = {}
    for kind, text in texts:
        if (probe := probe_of(text)) is not None:
            by_kind.setdefault(kind, []).append(probe)
    queues = [sorted(set(p), key=lambda s: (-len(s), s)) for p in by_kind.values()]
    chosen: list[str] = []
    while len(chosen) < n and any(queues):
        for queue in queues:
            while queue and queue[0] in chosen:
                queue.pop(0)
            if queue and len(chosen) < n:
                chosen.append(queue.pop(0))
    return chosen


def needles(probe: str) -> tuple[bytes, ...]:
    """The bytes a probe can be written as: UTF-8, and JSON's ``\\u`` escapes."""
    plain = probe.encode()
    escaped = json.dumps(probe)[1:-1].encode()
    return (plain,) if escaped == plain else (plain, escaped)


# --------------------------------------------------------------------------- files


@dataclass
class FileScan:
    files: int = 0
    size: int = 0
    hits: dict[str, set[int]] = field(default_factory=dict)  # relative path -> probe indexes

    def found(self, probes: Iterable[int]) -> dict[str, set[int]]:
        wanted = set(probes)
        return {path: hit & wanted for path, hit in self.hits.items() if hit & wanted}


def scan_files(root: Path, probes: Sequence[str], skip: Sequence[Path] = ()) -> FileScan:
    """Every file under ``root`` (but those under ``skip``) read whole, in chunks that
    overlap by the longest needle, for each probe."""
    scan = FileScan()
    encoded = [(i, n) for i, p in enumerate(probes) for n in needles(p)]
    overlap = max((len(n) for _, n in encoded), default=1) - 1
    skipped = [s.resolve() for s in skip]
    for path in sorted(root.rglob("*")) if root.is_dir() else ():
        if not path.is_file() or any(path.resolve().is_relative_to(s) for s in skipped):
            continue
        hits: set[int] = set()
        try:
            with path.open("rb") as fh:
                tail = b""
                while chunk := fh.read(CHUNK):
                    data = tail + chunk
                    hits.update(i for i, n in encoded if n in data)
                    tail = data[-overlap:] if overlap else b""
                    scan.size += len(chunk)
        except OSError:  # removed while scanning (a store's temporary file)
            continue
        scan.files += 1
        if hits:
            scan.hits[str(path.relative_to(root))] = hits
    return scan


# --------------------------------------------------------------------------- the log


@dataclass
class CubeLog:
    """One cube's records in every topic, as a reader holding the keys left finds them."""

    user: str | None = None  # the user of its first record (its first writer)
    records: int = 0
    topics: set[str] = field(default_factory=set)
    unreadable: int = 0  # sealed, and no key opens them
    opened: int = 0  # sealed, and opened with a key that exists now
    opened_with: dict[str, int] = field(default_factory=dict)  # key id -> records it opened
    plain: int = 0  # nothing sealed in them
    holding: int = 0  # records whose bytes or opened text hold a probe
    source_readable: int = 0  # records of SOURCE_TOPICS that can be read
    state: int = 0  # scheduler state records (the faust changelog)
    state_unreadable: int = 0
    state_holding: int = 0
    texts: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) sampled
    # the worker's announcements of erasures it did: the causing command's id -> reason
    erasures: dict[str, str] = field(default_factory=dict)


def cube_of(key: bytes | None, value: bytes) -> str | None:
    """The cube a record belongs to: the ``cube_id`` of its JSON, the cube of a value sealed
    whole (older forms, the scheduler's state), else its Kafka key (the cube id)."""
    if value.startswith(MAGIC):
        size = int.from_bytes(value[len(MAGIC):len(MAGIC) + 2], "big")
        return value[len(MAGIC) + 2:len(MAGIC) + 2 + size].decode(errors="replace")
    data = _json(value)
    if isinstance(cube := data.get("cube_id"), str):
        return cube
    if isinstance(inner := data.get("sealed"), str) and inner.startswith(PREFIX.decode()):
        data = _json(inner)  # the scheduler's state: a value sealed whole, in a field
    if isinstance(cube := data.get("cube"), str):
        return cube
    if key:
        return key.decode(errors="replace").split("\x1f")[-1].strip('"')
    return None


def _json(value: bytes | str) -> dict[str, Any]:
    """A value's JSON object ({} for anything else)."""
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def opened(value: bytes) -> tuple[str, str]:
    """("plain" | "opened" | "unreadable", the text a reader with the keys gets)."""
    raw: bytes | str = value
    if not is_sealed(value):
        inner = _json(value).get("sealed")
        if not isinstance(inner, str):  # the scheduler's state is sealed inside a field
            return "plain", value.decode(errors="replace")
        raw = inner
    try:
        text = unseal(raw)
    except (ValidationError, ValueError):
        return "unreadable", ""
    return "opened", text.decode(errors="replace") if isinstance(text, bytes) else text


def _messages(text: str) -> list[tuple[str, str]]:
    """The texts a readable conversation record holds (for sampling)."""
    data = _json(text)
    found = [("message", m["content"]) for m in data.get("messages") or ()
             if isinstance(m, dict) and isinstance(m.get("content"), str)]
    document = data.get("document")
    if isinstance(document, dict) and isinstance(document.get("text"), str):
        found.append(("document", document["text"]))
    if isinstance(data.get("memory"), str):
        found.append(("item", data["memory"]))
    return found


def log_topics(names: Iterable[str], settings: Settings) -> list[str]:
    """The topics of this deployment: the contract's (by prefix) and the worker's own
    (faust's changelog, by app id)."""
    prefix, app = settings.kafka.topic_prefix, settings.app_id
    return sorted(n for n in names if n.startswith(prefix) or n.startswith(app))


async def read_log(settings: Settings, bootstrap: str, cubes: set[str] | None,
                   probes: Mapping[str, Sequence[str]], sample: bool = False
                   ) -> dict[str, CubeLog]:
    """Every record of every topic up to its end now; per cube (``cubes``, or all), what
    a reader holding the keys left can read of it (``sample``: and a few of its texts)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await start_or_release(consumer, "erase check consumer")
    found: dict[str, CubeLog] = {}
    try:
        names = log_topics(await consumer.topics(), settings)
        tps = [TopicPartition(n, p) for n in names
               for p in sorted(consumer.partitions_for_topic(n) or ())]
        if not tps:
            return found
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:  # the archived records first (segment files), then the broker's
            for msg in archived(settings, tp):
                if msg.value is not None:
                    _count(found, settings, tp.topic, msg.key, msg.value, cubes, probes,
                           sample)
        at = await seek_past_archive(consumer, settings, tps)
        remaining = {tp for tp in tps if ends[tp] > at[tp]}
        last = time.monotonic()
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            if batch:
                last = time.monotonic()
            elif time.monotonic() - last > STALL_S:
                raise RuntimeError(f"reading the log: no records from the broker at {bootstrap} "
                                   f"for {STALL_S:.0f}s; is it running?")
            for tp, msgs in batch.items():
                for msg in msgs:
                    if msg.offset < ends[tp] and msg.value is not None:
                        _count(found, settings, tp.topic, msg.key, msg.value, cubes, probes,
                               sample)
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await stop_within(consumer, "erase check consumer")
    return found


def _count(found: dict[str, CubeLog], settings: Settings, topic: str, key: bytes | None,
           value: bytes, cubes: set[str] | None, probes: Mapping[str, Sequence[str]],
           sample: bool) -> None:
    cube = cube_of(key, value)
    if cube is None or (cubes is not None and cube not in cubes):
        return
    seen = found.setdefault(cube, CubeLog())
    if seen.user is None and isinstance(user := _json(value).get("user_id"), str):
        seen.user = user
    seen.records += 1
    seen.topics.add(topic)
    state, text = opened(value)
    match state:
        case "unreadable":
            seen.unreadable += 1
        case "opened":
            seen.opened += 1
            for kid in set(_KID.findall(value)) or {b"whole"}:
                seen.opened_with[kid.decode()] = seen.opened_with.get(kid.decode(), 0) + 1
        case _:
            seen.plain += 1
    if state == "opened" and topic == settings.topic("memory.updates"):
        _erasure(seen, text)
    if state != "unreadable" and any(topic == settings.topic(t) for t in SOURCE_TOPICS):
        seen.source_readable += 1
        if sample and len(seen.texts) < 4 * SAMPLES:
            seen.texts.extend(_messages(text))
    mine = probes.get(cube, ())
    holding = any(n in value for p in mine for n in needles(p)) or any(p in text for p in mine)
    seen.holding += holding
    if "changelog" in topic:
        seen.state += 1
        seen.state_unreadable += state == "unreadable"
        seen.state_holding += holding


def _erasure(seen: CubeLog, text: str) -> None:
    """Note the worker's announcement of a cube erased (no node, action ``deleted``)."""
    data = _json(text)
    cause, reason = data.get("cause_event_id"), data.get("reason")
    if data.get("action") == "deleted" and data.get("node_id") is None \
            and isinstance(cause, str) and isinstance(reason, str):
        seen.erasures[cause] = reason


def kid_of(key: bytes | None) -> str | None:
    """The id a sealed field names its key by (never the key)."""
    return key_id(key) if key is not None else None


def key_files_with(directory: Path | None, kid: str) -> list[str]:
    """Files under the key directory that still hold the key with this id."""
    if directory is None or not directory.is_dir():
        return []
    held = []
    for path in sorted(directory.rglob("*")):
        try:
            data = path.read_bytes() if path.is_file() else b""
        except OSError:
            continue
        if len(data) == 32 and key_id(data) == kid:
            held.append(path.name)
    return held

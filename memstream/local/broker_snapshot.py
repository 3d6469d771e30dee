"""A last good copy of the embedded broker's data file, put back when the file is lost.

noida-db 0.2.3 keeps its whole Kafka log in memory and saves it about once a second as one
JSON document: it writes ``kafka.tmp`` and renames it over ``kafka.json`` (no fsync). A
SIGKILL therefore loses what was acknowledged since the last save but cannot leave half a
file; measured on 0.2.3 (see docs/durability.md): a truncated, empty or unparseable
``kafka.json`` makes noida refuse to start ("failed to parse kafka snapshot"), and a MISSING
one makes it start with an empty log, which it then saves over everything. So before each
start memstream checks the file and, when it is missing or damaged, puts back the last copy
that was whole; the worker refreshes that copy while it runs.

Because noida replaces the file by rename and never writes into it, the copy is a hard link
to the file's inode: free, whatever the log's size, and it keeps its content when noida
saves the next version.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "DAMAGED", "DATA_FILE", "LAST_GOOD", "Restored", "damage", "preserve", "restore",
    "save_allowance_s",
]

log = logging.getLogger(__name__)

DATA_FILE = "kafka.json"
LAST_GOOD = "kafka.last-good.json"
DAMAGED = "kafka.damaged.json"  # the file a restore replaced, kept for inspection
_HEAD = b'{"topics":'
# The last top-level field noida 0.2.3 writes; a file cut short anywhere lacks it at its end.
_TAIL_KEY = b'"broker_configs":'
_TAIL_BYTES = 1 << 16


def damage(path: Path) -> str | None:
    """What is wrong with the data file at ``path`` ("missing", "empty", "cut short" …),
    or None when it is whole. Reads its first and last bytes only (the file can be GBs)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty"
        with path.open("rb") as fh:
            head = fh.read(len(_HEAD))
            fh.seek(max(size - _TAIL_BYTES, 0))
            tail = fh.read().rstrip()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if head != _HEAD:
        return "not a noida log (unexpected start)"
    # it ends with the broker_configs map and the document closing: "}}"
    if not tail.endswith(b"}}") or _TAIL_KEY not in tail:
        return f"cut short or damaged ({size} bytes, no closing fields)"
    return None


def preserve(broker_dir: Path | str) -> bool:
    """Make the current data file the last good copy if it is whole; False if it is not."""
    directory = Path(broker_dir)
    current = directory / DATA_FILE
    if damage(current) is not None:
        return False
    staging = directory / f".{LAST_GOOD}.new"
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    try:
        os.link(current, staging)
    except FileNotFoundError:
        return False  # renamed away between the check and the link: next time
    except OSError:
        shutil.copy2(current, staging)  # a filesystem without hard links
    os.replace(staging, directory / LAST_GOOD)
    return True


@dataclass(frozen=True)
class Restored:
    """What ``restore`` found wrong and which copy it put back."""

    problem: str
    copy_saved_at: datetime
    copy_bytes: int

    def describe(self) -> str:
        return (f"the broker's data file was {self.problem}; restored its last good copy, "
                f"saved {self.copy_saved_at:%Y-%m-%d %H:%M:%S} UTC ({self.copy_bytes} bytes): "
                "records written after that are lost")


def restore(broker_dir: Path | str) -> Restored | None:
    """Before the broker starts: keep a whole data file as the last good copy, or put the
    last good copy back in place of a missing or damaged one (the damaged one is kept as
    ``kafka.damaged.json``). None when nothing had to be restored, or nothing could be."""
    directory = Path(broker_dir)
    current, copy = directory / DATA_FILE, directory / LAST_GOOD
    problem = damage(current)
    if problem is None:
        preserve(directory)
        return None
    if problem == "missing" and not copy.exists():
        return None  # a fresh data dir
    if damage(copy) is not None:
        log.error("the broker's data file %s is %s and there is no whole copy to restore",
                  current, problem)
        return None
    if current.exists():
        os.replace(current, directory / DAMAGED)
    staging = directory / f".{DATA_FILE}.restore"
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    try:
        os.link(copy, staging)  # noida replaces the file by rename, so sharing is safe
    except OSError:
        shutil.copy2(copy, staging)
    os.replace(staging, current)
    stat = copy.stat()
    restored = Restored(problem, datetime.fromtimestamp(stat.st_mtime, UTC), stat.st_size)
    log.error("%s", restored.describe())
    return restored


# noida saves its whole log on SIGTERM; measured ~0.3 s per 100 MB idle and several times
# that on a busy machine. A stop allows this much per byte before it falls back to SIGKILL
# (which loses what the save had not written yet).
_SAVE_BYTES_PER_S = 20_000_000


def save_allowance_s(broker_dir: Path | str, base_s: float) -> float:
    """How long a clean stop may take: ``base_s`` plus the time to save a log of the data
    file's current size (a 1.5 GB log took more than 10 s and was killed mid-save)."""
    try:
        size = (Path(broker_dir) / DATA_FILE).stat().st_size
    except OSError:
        return base_s
    return base_s + size / _SAVE_BYTES_PER_S

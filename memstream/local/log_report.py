"""What `memstream up` and `status` say about records the broker lost (kafka.log_ends)."""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError

from memstream.kafka.log_ends import Loss, check, read_ledger, recorded_losses
from memstream.local.broker_snapshot import Restored
from memstream.topics.settings import Settings

log = logging.getLogger(__name__)

ADVICE = ("a client waiting on one of these writes fails with 'the broker lost this write'; "
          "publish what was lost again (e.g. `memstream add`)")


def describe(losses: list[Loss]) -> list[str]:
    total = sum(x.count for x in losses)
    return [f"the broker lost {total} record(s) memstream had seen:",
            *(f"  {x.describe()}" for x in losses), ADVICE]


async def after_start(settings: Settings, bootstrap: str, restored: Restored | None) -> list[str]:
    """Lines for `up` once the broker answers: a restored data file, and every loss against
    what memstream last saw (recorded once in log-losses.json). Empty when all is well."""
    note = restored.describe() if restored is not None else None
    lines = [note] if note else []
    try:
        losses = await check(settings, bootstrap, record=True, note=note)
    except (KafkaError, OSError, TimeoutError) as exc:
        return [*lines, f"could not compare the broker's log with what memstream saw ({exc})"]
    return [*lines, *describe(losses)] if losses else lines


async def status_report(settings: Settings, bootstrap: str | None) -> dict[str, Any]:
    """``{"lost": [...], "checked_against": ISO time, "last_report": {...}|None}``."""
    seen = read_ledger(settings.data_dir)
    reports = recorded_losses(settings.data_dir)
    out: dict[str, Any] = {"lost": [], "checked_against": seen.at.isoformat() if seen else None,
                           "last_report": reports[-1] if reports else None}
    if bootstrap and seen is not None:
        try:
            losses = await check(settings, bootstrap)
        except (KafkaError, OSError, TimeoutError) as exc:
            out["error"] = str(exc)
        else:
            out["lost"] = [x.describe() for x in losses]
    return out


def status_lines(report: dict[str, Any]) -> list[str]:
    """The `status` table's "log" row (first line) and any lines below it."""
    if report.get("error"):
        return [f"not compared ({report['error']})"]
    if report["lost"]:
        return ["[red]records lost[/]", *(f"  {x}" for x in report["lost"]), ADVICE]
    seen = report["checked_against"]
    first = (f"intact (holds all memstream saw by {seen[:19]}Z)" if seen
             else "not compared yet (no worker has recorded it)")
    last = report.get("last_report")
    if last:
        count = sum(int(x["seen"]) - int(x["now"]) for x in last.get("losses", []))
        what = f"{count} record(s) lost" if count else "no loss measured"
        note = f"; {last['note']}" if last.get("note") else ""
        first += f"; last restart problem {last['found_at'][:19]}Z ({last['by']}): {what}{note}"
    return [first]

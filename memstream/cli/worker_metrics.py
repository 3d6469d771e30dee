"""What ``memstream status`` shows of a worker's metrics: read from its ``/metrics`` endpoint
(the URL the worker records in ``worker.json``) and summarised per stage, and the partitions
it reports stalled beside the lag read from the broker."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table


@dataclass
class StageSummary:
    records: float = 0.0
    per_second: float = 0.0
    dead_letters: float = 0.0
    retries: float = 0.0


@dataclass(frozen=True)
class StalledPartition:
    """A partition the worker reports stalled (``memstream_stall_seconds``)."""

    stage: str
    topic: str
    partition: int
    idle_s: float  # how long none of the records waiting on it was handled


@dataclass
class MetricsSummary:
    stages: dict[str, StageSummary] = field(default_factory=dict)
    llm_tokens: float = 0.0
    llm_calls: float = 0.0  # requests asked of the model (answers on record not counted)
    budget_exceeded: float = 0.0
    turns: float = 0.0  # conversation turns extracted
    calls_by_task: dict[str, float] = field(default_factory=dict)
    tokens_by_kind: dict[str, float] = field(default_factory=dict)
    stalls: list[StalledPartition] = field(default_factory=list)

    def per_turn(self, value: float) -> float | None:
        return value / self.turns if self.turns else None

    @property
    def dead_letters(self) -> float:
        return sum(s.dead_letters for s in self.stages.values())


def parse(text: str) -> MetricsSummary:
    """The summary of one scrape (Prometheus text format)."""
    out = MetricsSummary()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            stage = sample.labels.get("stage", "")
            match sample.name:
                case "memstream_stage_records_total":
                    out.stages.setdefault(stage, StageSummary()).records = sample.value
                case "memstream_stage_records_per_second":
                    out.stages.setdefault(stage, StageSummary()).per_second = sample.value
                case "memstream_dead_letters_total":
                    out.stages.setdefault(stage, StageSummary()).dead_letters = sample.value
                case "memstream_stage_retries_total":
                    out.stages.setdefault(stage, StageSummary()).retries = sample.value
                case "memstream_llm_tokens_total":
                    out.llm_tokens += sample.value
                    kind = sample.labels.get("kind", "")
                    out.tokens_by_kind[kind] = out.tokens_by_kind.get(kind, 0.0) + sample.value
                case "memstream_llm_calls_total" if sample.labels.get("outcome") != "recorded":
                    out.llm_calls += sample.value
                    task = sample.labels.get("task", "")
                    out.calls_by_task[task] = out.calls_by_task.get(task, 0.0) + sample.value
                case "memstream_turns_ingested_total":
                    out.turns = sample.value
                case "memstream_llm_budget_exceeded_total":
                    out.budget_exceeded += sample.value
                case "memstream_stall_seconds":
                    out.stalls.append(StalledPartition(
                        stage, sample.labels.get("topic", ""),
                        int(sample.labels.get("partition", "0")), sample.value))
    return out


def _get(url: str, timeout_s: float) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url}")
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - checked above
        body: bytes = response.read()
    return body.decode("utf-8")


async def fetch(url: str, timeout_s: float = 3.0) -> MetricsSummary:
    return parse(await asyncio.to_thread(_get, url, timeout_s))


async def summary_table(url: str) -> Table | str:
    """A table for the terminal: per stage records, records/s, dead letters, retries."""
    try:
        summary = await fetch(url)
    except (OSError, ValueError) as exc:
        return f"metrics: cannot read {url} ({exc})"
    table = Table("stage", "records", "records/s", "dead letters", "retries",
                  title=f"worker metrics ({url})", title_justify="left")
    for name, s in sorted(summary.stages.items()):
        table.add_row(name, f"{s.records:.0f}", f"{s.per_second:.1f}", f"{s.dead_letters:.0f}",
                      f"{s.retries:.0f}")
    table.add_row("all", f"{sum(s.records for s in summary.stages.values()):.0f}", "",
                  f"{summary.dead_letters:.0f}", "", style="bold")
    table.caption = (f"LLM: {summary.llm_calls:.0f} calls, {summary.llm_tokens:.0f} tokens"
                     + (f"; {summary.budget_exceeded:.0f} refused over budget"
                        if summary.budget_exceeded else "") + per_turn_line(summary))
    return table


async def summary_json(url: str) -> dict[str, Any]:
    """What ``summary_table`` shows, for ``status --json``: per stage records, records/s,
    dead letters and retries; LLM calls and tokens, in all and per ingested turn."""
    try:
        summary = await fetch(url)
    except (OSError, ValueError) as exc:
        return {"url": url, "error": f"cannot read {url} ({exc})"}
    per_turn = None
    if summary.turns:
        per_turn = {
            "calls": summary.per_turn(summary.llm_calls),
            "tokens": {k: summary.per_turn(v) for k, v in sorted(summary.tokens_by_kind.items())},
            "calls_by_task": {k: summary.per_turn(v)
                              for k, v in sorted(summary.calls_by_task.items())}}
    return {
        "url": url,
        "stages": {name: {"records": s.records, "records_per_second": s.per_second,
                          "dead_letters": s.dead_letters, "retries": s.retries}
                   for name, s in sorted(summary.stages.items())},
        "records": sum(s.records for s in summary.stages.values()),
        "dead_letters": summary.dead_letters,
        "llm": {"calls": summary.llm_calls, "tokens": summary.llm_tokens,
                "budget_exceeded": summary.budget_exceeded,
                "calls_by_task": dict(sorted(summary.calls_by_task.items())),
                "tokens_by_kind": dict(sorted(summary.tokens_by_kind.items()))},
        "turns": summary.turns,
        "per_turn": per_turn,
        "stalls": [{"stage": s.stage, "topic": s.topic, "partition": s.partition,
                    "idle_s": s.idle_s} for s in summary.stalls],
    }


async def stalled_partitions(url: str) -> list[StalledPartition]:
    """The partitions the worker reports stalled now (none when its metrics cannot be read:
    ``summary_table`` says why)."""
    try:
        return (await fetch(url)).stalls
    except (OSError, ValueError):
        return []


def lag_table(lag: Mapping[str, Mapping[int, int]],
              stalls: Sequence[StalledPartition] = ()) -> Table | None:
    """Records not yet processed per input topic (from the broker), and its partitions the
    worker reports stalled: records wait there and none was handled for a while."""
    rows = [(t, sum(p.values())) for t, p in sorted(lag.items()) if p]
    if not rows:
        return None
    by_topic: dict[str, list[str]] = {}
    for s in sorted(stalls, key=lambda s: (s.topic, s.partition)):
        waiting = lag.get(s.topic, {}).get(s.partition)
        wait = f"{waiting} waiting, " if waiting is not None else ""
        by_topic.setdefault(s.topic, []).append(
            f"[{s.partition}] {wait}none handled for {s.idle_s:.0f}s ({s.stage})")
    table = Table("topic", "lag (records not yet processed)", *(["stalled"] if stalls else []))
    for topic, total in rows:
        table.add_row(topic, str(total), *(["; ".join(by_topic.get(topic, []))]
                                           if stalls else []))
    return table


def per_turn_line(summary: MetricsSummary) -> str:
    """Calls and tokens per ingested turn, and calls per turn by task (what a turn costs)."""
    calls = summary.per_turn(summary.llm_calls)
    if calls is None:
        return ""
    tokens = {k: summary.per_turn(v) or 0.0 for k, v in sorted(summary.tokens_by_kind.items())}
    by_task = ", ".join(f"{task} {summary.per_turn(n) or 0.0:.2f}"
                        for task, n in sorted(summary.calls_by_task.items()))
    spent = ", ".join(f"{kind} {n:.0f}" for kind, n in tokens.items())
    return (f"\nper turn ({summary.turns:.0f} turns): {calls:.2f} calls"
            + (f", tokens {spent}" if spent else "") + (f"; calls by task: {by_task}"
                                                          if by_task else ""))

"""What the scheduler remembers about each cube between messages.

Plain pydantic, so the logic is testable without faust. The agent keeps one
``CubeState`` per cube in a faust Table (JSON values, changelog-backed), so the
query history, the last answer and the last retrieval time survive a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from memstream.topics.events import ScheduleMessage
from memstream.topics.sealing import is_sealed, seal, unseal


def state_key(user_id: str, cube_id: str) -> bytes:
    """One state per (user, cube): a shared cube keeps each user's conversation apart."""
    return f"{user_id}\x1f{cube_id}".encode()


class QueryRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    text: str
    at: AwareDatetime
    keywords: tuple[str, ...] = ()


class LastReplacement(BaseModel):
    """The last working memory the scheduler emitted, until the sink is seen to apply it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    at: AwareDatetime
    refs: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()


class CubeState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    user_id: str
    cube_id: str
    partition: int  # of the cube's schedule topics (and of the table's changelog)
    first_seen_at: AwareDatetime
    last_activity_at: AwareDatetime
    queries: tuple[QueryRecord, ...] = ()
    last_answer: str | None = None
    last_answer_at: AwareDatetime | None = None
    last_retrieval_at: AwareDatetime | None = None
    replacement: LastReplacement | None = None

    @property
    def key(self) -> bytes:
        return state_key(self.user_id, self.cube_id)

    @classmethod
    def new(cls, msg: ScheduleMessage, partition: int, now: datetime) -> CubeState:
        return cls(user_id=msg.user_id, cube_id=msg.cube_id, partition=partition,
                   first_seen_at=now, last_activity_at=now)

    @classmethod
    def load(cls, value: Mapping[str, Any] | None) -> CubeState | None:
        """None for no state, and for the state of an erased cube (its key is destroyed)."""
        if value is None:
            return None
        if "sealed" in value:  # held sealed in the table and its changelog (topics/sealing.py)
            try:
                return cls.model_validate_json(unseal(str(value["sealed"])))
            except ValidationError:
                return None
        return cls.model_validate(value)

    def dump(self) -> dict[str, Any]:
        data = self.model_dump_json().encode()
        sealed = seal(self.cube_id, data)
        return {"sealed": sealed.decode()} if is_sealed(sealed) else self.model_dump(mode="json")

    def touched(self, now: datetime) -> CubeState:
        return self.model_copy(update={"last_activity_at": max(now, self.last_activity_at)})

    def with_query(self, record: QueryRecord, keep: int) -> CubeState:
        """The query appended (at most ``keep`` kept); a redelivered query is not added twice."""
        if any(q.event_id == record.event_id for q in self.queries):
            return self
        return self.model_copy(update={"queries": (*self.queries, record)[-keep:]})

    def with_answer(self, text: str, at: datetime) -> CubeState:
        return self.model_copy(update={"last_answer": text, "last_answer_at": at})

    def recent_queries(self, n: int) -> list[str]:
        return [q.text for q in self.queries[-n:]]

    def seconds_since_retrieval(self, now: datetime) -> float:
        """Since the last retrieval or, before the first one, since the cube was first seen."""
        reference = self.last_retrieval_at or self.first_seen_at
        return (now - reference).total_seconds()

    def retrieval_due(self, now: datetime, interval_s: float) -> bool:
        """The timed trigger: the cube's last retrieval is at least ``interval_s`` old."""
        return self.seconds_since_retrieval(now) >= interval_s

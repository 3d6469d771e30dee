"""What the tests of the Searcher's model tasks ask: a question at a fixed time (the goal
parser's context) and the memories the reasoner chooses among."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memstream.streams.prompts.search import GoalContext, ReasonerCandidate

NOW = datetime(2025, 5, 2, 18, 30, tzinfo=UTC)  # a Friday
IDS = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"memstream-test-{n}")) for n in range(1, 6)]
CANDIDATES = [
    ReasonerCandidate(id=IDS[0], text="The user's flight to Lisbon is on May 14."),
    ReasonerCandidate(id=IDS[1], text="The user is vegetarian."),
    ReasonerCandidate(id=IDS[2], text="The user booked flights to Lisbon and Porto."),
    ReasonerCandidate(id=IDS[3], text="用户的航班是5月14日。"),
]


def goal(query: str, **kw: object) -> GoalContext:
    """The goal parser's context for ``query``, asked at ``NOW``; ``kw``: more fields."""
    return GoalContext.model_validate({"query": query, "now": NOW, **kw})

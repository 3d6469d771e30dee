"""A trip told in English and in Chinese, as the optimizer's pair tasks (relation detection,
inferred facts) see it; shared by the tests of their prompts and rules stand-ins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.prompts.relations import RelationContext, RelationNode

T0 = datetime(2025, 5, 2, 9, 0, tzinfo=UTC)


def node(
    text: str, *, hours: float = 0, tags: list[str] | None = None, **kw: object
) -> RelationNode:
    return RelationNode.model_validate(
        {"text": text, "tags": tags or [], "updated_at": T0 + timedelta(hours=hours), **kw}
    )


def pair(new: RelationNode, old: RelationNode) -> RelationContext:
    return RelationContext(new=new, old=old)


# The trip conversation, as the extraction stage would store it (tags included).
DELAY = node("The user's flight to Berlin was delayed by three hours.",
             tags=["flight", "berlin", "delay"], hours=1)
MISSED = node("The user missed the 2 pm meeting with the client in Berlin because of the "
              "flight delay.", tags=["meeting", "client", "berlin"], hours=2)
BOOKED = node("The user booked a flight to Berlin for the client meeting.",
              tags=["flight", "berlin", "client"], hours=0)
ZH_DELAY = node("用户去柏林的航班延误了三个小时。", tags=["航班", "延误", "柏林"], hours=1)
ZH_MISSED = node("用户因为航班延误错过了在柏林和客户的会议。", tags=["会议", "客户", "柏林"],
                 hours=2)
ZH_BOOKED = node("用户为了和客户开会订了去柏林的航班。", tags=["航班", "客户", "柏林"], hours=0)

"""The sample conversation the demo publishes (also used by tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from memstream.topics.events import Message

DEMO_USER = "demo-user"


def sample_sessions(start: datetime) -> dict[str, list[Message]]:
    """Three short sessions a user might have had with an assistant."""

    def msgs(session: str, base: datetime, turns: Sequence[tuple[str, str]]) -> list[Message]:
        return [
            Message(id=f"{session}-{i}", role=role, content=text,  # type: ignore[arg-type]
                    timestamp=base + timedelta(minutes=i))
            for i, (role, text) in enumerate(turns)
        ]

    return {
        "trip-planning": msgs("trip-planning", start, [
            ("user", "I'm planning a trip to Lisbon next month with my sister Ana."),
            ("assistant", "Nice! You could try a day trip to Sintra."),
            ("user", "I love seafood but I'm allergic to shellfish. I usually travel light."),
            ("user", "We booked a flight for May 14 and a small hotel in Alfama."),
        ]),
        "饮食习惯": msgs("diet-zh", start + timedelta(days=1), [
            ("user", "我最近开始吃素了，因为想更健康一点。"),
            ("assistant", "可以试试豆腐和扁豆，蛋白质很丰富。"),
            ("user", "我每天早上都会喝一杯绿茶。周末我喜欢去公园跑步。"),
        ]),
        "work": msgs("work", start + timedelta(days=2), [
            ("user", "My manager Tom asked me to finish the quarterly report by Friday."),
            ("user", "I prefer working in the early morning when the office is quiet."),
        ]),
    }

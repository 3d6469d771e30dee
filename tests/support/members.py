"""Members of two clusters, in English and in Chinese, as the group tasks (cluster summaries,
concept aggregation) see them; shared by the tests of their prompts and rules stand-ins."""

from __future__ import annotations

from memstream.streams.prompts.members import MemberNote, statement


def m(text: str, key: str = "", *tags: str) -> MemberNote:
    return MemberNote(text=text, key=key, tags=list(tags))


HIKING = [
    m("The user hiked the Zugspitze in July 2024.", "Zugspitze hike", "hiking", "mountains",
      "preference"),
    m("The user bought new hiking boots for the Alps.", "new hiking boots", "Hiking", "gear",
      "mountains"),
    m("The user plans to climb Mont Blanc next summer.", "Mont Blanc plan", "mountains",
      "hiking", "plan"),
    m("The user prefers hut-to-hut tours over camping.", "hut-to-hut tours", "hiking",
      "preference"),
]
ZH_COOKING = [
    m("用户周末喜欢包饺子，最爱韭菜鸡蛋馅。", "周末包饺子", "饺子", "做饭", "偏好"),
    m("用户最近在学做川菜，已经会做麻婆豆腐了。", "学做川菜", "川菜", "做饭", "学习"),
    m("用户每天早上自己煮粥。", "早上煮粥", "早餐", "做饭", "习惯"),
    m("用户做菜从来不放辣椒。", "做菜不放辣", "做饭", "辣椒", "偏好"),
]


def quoted(value: str, members: list[MemberNote]) -> list[str]:
    """The member texts a value consists of, in order; fails if anything else is in it."""
    statements = [statement(mb.text) for mb in members]
    found: list[str] = []
    rest = value
    while rest:
        head = next((t for t in statements if rest.startswith(t)), None)
        assert head is not None, f"not a verbatim member statement: {rest!r}"
        found.append(head)
        rest = rest[len(head):].lstrip(" ")
    return found

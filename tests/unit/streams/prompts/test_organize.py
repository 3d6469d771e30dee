"""The organize task's answer model (streams/prompts/organize.py): it reads what models write."""

from __future__ import annotations

from memstream.streams.prompts.organize import OrganizeResponse


def test_organize_answers_are_read_leniently() -> None:
    answer = OrganizeResponse.model_validate({"links": [
        {"pair": 0, "relation": "causes", "direction": "NEW -> OLD",
         "inferred": "the user will rebook"},
        {"pair": 1, "relation": "none"}], "concepts": None})
    link = answer.link_for(0)
    assert link is not None and link.relation == "CAUSE" and link.direction == "new_to_old"
    assert link.inferred == "It can be inferred that the user will rebook"
    assert answer.link_for(1) is None and answer.concepts == []

"""Fusion as a model task (streams/prompts/fusion.py): its prompt and the answers it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.prompts.fusion import FUSION, FusionContext, FusionResponse
from tests.support.statements import T0, T1, mem


def test_fusion_response_needs_text_and_splits_tag_strings() -> None:
    answer = FusionResponse.model_validate({"memory": " The user moved. ", "tags": "home, 搬家"})
    assert answer.memory == "The user moved." and answer.tags == ["home", "搬家"]
    with pytest.raises(ValidationError):
        FusionResponse.model_validate({"memory": "  ", "tags": []})


def test_fusion_prompt_tells_the_newer_one_wins_in_the_inputs_language() -> None:
    ctx = FusionContext(existing=mem("The user lives in Berlin.", T1),
                        new=mem("The user moved to Lisbon.", T0), relation="contradictory")
    system, user = (m["content"] for m in FUSION.render(ctx))
    assert "NEWER one" in system and "Chinese in, Chinese out" in system
    assert "The user lives in Berlin." in user and "The user moved to Lisbon." in user
    assert "EXISTING memory is the more recent" in user
    redundant = FUSION.render(ctx.model_copy(update={"relation": "redundant"}))[0]["content"]
    assert "same information" in redundant and "NEWER one" not in redundant

"""The search recipe (topics/recipe.py): the ``fast`` preset is the flat settings' defaults
it replaced, value for value; overrides are checked field by field; old names are refused."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from memstream.streams.core.retrieval import statement_weights
from memstream.topics.recipe import FORMER_FIELDS, PRESETS, UNIT, Recipe, flat
from memstream.topics.settings import SearchSettings, Settings

# Every ranking setting and constant before the recipe: its old name, where its value lives
# now (a recipe path, or "unit": fixed at the unit), and the value it had.
OLD_DEFAULTS: list[tuple[str, str, Any]] = [
    ("current_first", "boosts.current_first", True),
    ("topic_weight", "boosts.topic", 0.9),
    ("concept_weight", "boosts.concept", 0.95),
    ("fact_weight", "unit", 1.0),
    ("tag_overlap_min", "recall.tags_min", 2),
    ("rrf_k", "fusion.statement_k", 60),
    ("vector_weight", "unit", 1.0),
    ("keyword_weight", "fusion.keyword", 0.15),
    ("key_weight", "unit", 1.0),
    ("tag_weight", "fusion.tags", 0.5),
    ("episode_weight", "unit", 1.0),
    ("keyword_recall", "fusion.keyword", 0.15),  # on: a keyword weight above 0
    ("cosine_spread", "boosts.cosine_spread", 0.5),
    ("turn_ranking", "recall.turns", True),
    ("turn_dense_weight", "unit", 1.0),
    ("turn_bm25_weight", "fusion.bm25", 1.5),
    ("episode_dense_weight", "unit", 1.0),
    ("episode_bm25_weight", "fusion.bm25", 1.5),
    ("turn_rrf_k", "fusion.turn_k", 10),
    ("related_weight", "recall.related_words", 0.5),
    ("speaker_weight", "boosts.speaker", 0.2),
    ("time_weight", "fusion.dates", 2.0),
    ("window_before", "excerpts.before", 1),
    ("window_after", "excerpts.after", 2),
    ("before_share", "excerpts.before_share", 0.0),
    ("passage_turns", "excerpts.passage_turns", 8),
    ("passage_after", "excerpts.passage_after", 3),
    ("episode_pool", "recall.episodes", 50),
    ("statement_pool", "recall.statements", 150),
    ("precise_hits", "excerpts.statement", True),
    ("irrelevant_overlap", "boosts.irrelevant_overlap", 0.5),
    ("irrelevant_weight", "boosts.irrelevant", 0.5),
    ("other_weight", "boosts.others", 0.15),
    # constants in streams/core/retrieval.py: max(top_k * 3, 20) candidates, and fine mode's
    # shortlist max(top_k * 2, 10)
    ("pool = max(top_k * 3, …)", "recall.candidates.per_hit", 3),
    ("pool = max(…, 20)", "recall.candidates.least", 20),
    ("fine: max(top_k * 2, …)", "recall.shortlist.per_hit", 2),
    ("fine: max(…, 10)", "recall.shortlist.least", 10),
]


def at(recipe: Recipe, path: str) -> Any:
    node: Any = recipe
    for part in path.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize(("old", "path", "value"), OLD_DEFAULTS,
                         ids=[o for o, _, _ in OLD_DEFAULTS])
def test_fast_is_every_old_default(old: str, path: str, value: Any) -> None:
    recipe = Settings().search.ranking
    assert recipe == PRESETS["fast"]
    now = UNIT if path == "unit" else at(recipe, path)
    assert type(now) is type(value) and now == value, (old, path, now)


def test_the_weights_fixed_at_the_unit_are_used_as_one() -> None:
    recipe = PRESETS["fast"]
    weights = statement_weights(recipe.fusion)
    assert weights == {"vector": 1.0, "keyword": 0.15, "key": 1.0, "tags": 0.5}
    assert recipe.level_weight("fact") == recipe.level_weight("") == 1.0
    assert (recipe.level_weight("topic"), recipe.level_weight("concept")) == (0.9, 0.95)


def test_every_old_field_is_in_the_table_and_every_recipe_field_has_an_old_one() -> None:
    assert {o for o, _, _ in OLD_DEFAULTS if not o.startswith(("pool", "fine"))} == set(
        FORMER_FIELDS)
    assert set(flat(PRESETS["fast"].model_dump())) == {p for _, p, _ in OLD_DEFAULTS} - {"unit"}
    assert not set(FORMER_FIELDS) & set(SearchSettings.model_fields)


def test_precise_differs_from_fast_in_the_turn_before_only() -> None:
    fast, precise = (flat(PRESETS[n].model_dump()) for n in ("fast", "precise"))
    assert {p for p in fast if fast[p] != precise[p]} == {"excerpts.before_share"}
    assert precise["excerpts.before_share"] == 0.5
    assert SearchSettings(recipe="precise").ranking == PRESETS["precise"]


def test_overrides_change_single_fields_of_the_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTREAM_SEARCH__RECIPE", "precise")
    monkeypatch.setenv("MEMSTREAM_SEARCH__OVERRIDES",
                       '{"fusion.turn_k": 30, "excerpts": {"before": 0}, "recall.turns": "false"}')
    recipe = Settings().search.ranking
    assert (recipe.fusion.turn_k, recipe.excerpts.before, recipe.recall.turns) == (30, 0, False)
    assert recipe.excerpts.before_share == 0.5  # the preset's
    assert recipe.fusion.bm25 == 1.5
    search = Settings().search
    assert search.with_overrides({"boosts.speaker": 0}).ranking.boosts.speaker == 0
    assert search.model_copy(update={"overrides": {}}).ranking == PRESETS["precise"]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"fusion.k": 30}, "'fusion.k' is not a recipe field (fusion has turn_k, statement_k"),
    ({"fusion": 3}, "'fusion' is not a recipe field (the recipe has recall, fusion"),
    ({"recall.candidates": 3}, "'recall.candidates' is not a recipe field"),
    ({"fusion.turn_k": 0}, "fusion.turn_k: Input should be greater than or equal to 1 (got 0)"),
    ({"boosts.speaker": "a lot"}, "boosts.speaker: Input should be a valid number"),
])
def test_a_wrong_override_is_refused_naming_the_field(overrides: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(ValidationError, match=rf"search\.overrides: {re.escape(message)}"):
        SearchSettings(overrides=overrides)


def test_an_old_flat_setting_is_refused_with_its_new_spelling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTREAM_SEARCH__TURN_RRF_K", "5")
    with pytest.raises(ValidationError, match=re.escape(
            "search.turn_rrf_k is now the recipe field fusion.turn_k: set search.overrides, "
            "e.g. MEMSTREAM_SEARCH__OVERRIDES='{\"fusion.turn_k\": ...}'")):
        Settings()
    monkeypatch.delenv("MEMSTREAM_SEARCH__TURN_RRF_K")
    monkeypatch.setenv("MEMSTREAM_SEARCH__VECTOR_WEIGHT", "0")
    with pytest.raises(ValidationError, match="search.vector_weight is no longer a setting"):
        Settings()


def test_an_unknown_preset_is_refused() -> None:
    with pytest.raises(ValidationError, match="'fast' or 'precise'"):
        SearchSettings(recipe="context")  # type: ignore[arg-type]

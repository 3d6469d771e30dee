"""The search recipe: how a search ranks, as one declarative model with named presets.

A search recalls candidates from several sources, fuses their rankings by reciprocal rank,
weights some of the fused scores up or down, and returns each hit as an excerpt of the
turns around it. ``Recipe`` holds each of those choices once; ``PRESETS`` names the
combinations worth naming. Settings pick a preset (``search.recipe``) and change single
fields of it (``search.overrides``, dotted paths: ``{"fusion.turn_k": 30}``). What chose
each value: docs/benchmarks.md, *Search recipe*.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RecipeName = Literal["fast", "precise"]

# The unit every weight is relative to: the dense (cosine) ranking in each fusion, a fact
# among hierarchy levels. A definition, not a setting.
UNIT = 1.0


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pool(_Part):
    """How many candidates a step takes: ``per_hit`` per hit asked for, at least ``least``."""

    per_hit: int = Field(ge=1)
    least: int = Field(ge=1)

    def size(self, top_k: int) -> int:
        return max(top_k * self.per_hit, self.least)


class Recall(_Part):
    """Which sources are asked, and how many candidates each gives."""

    # Episodes ranked by their turns (streams/core/turn_ranking.py); off: an episode competes
    # whole, as any other memory.
    turns: bool = True
    # Memories recalled by the graph's tag index share at least this many of the query's tags.
    tags_min: int = Field(default=2, ge=1)
    # Weight of a question's related words (streams/core/related_words.py) in BM25.
    related_words: float = Field(default=0.5, ge=0)
    statements: int = Field(default=150, ge=1)  # statements ranked by cosine, for turns
    episodes: int = Field(default=50, ge=1)  # episodes ranked by cosine, for turns
    # Candidates of the statement fusion (each source's list, the vector search) per search.
    candidates: Pool = Pool(per_hit=3, least=20)
    # fine mode: the hits the reasoner chooses among.
    shortlist: Pool = Pool(per_hit=2, least=10)


class Fusion(_Part):
    """Reciprocal-rank fusion: a candidate scores the sum, over the rankings holding it, of
    weight / (k + rank), normalised so that first place in every ranking scores 1. Each
    weight is relative to the dense ranking's (``UNIT``); a source of weight 0 is not asked.

    Two fusions use these: the turns' (a turn's statements and its episode by cosine, the
    turn and its episode by BM25, the date a question names) and the statements' (cosine,
    full-text keywords, the exact key, tag overlap)."""

    turn_k: int = Field(default=10, ge=1)
    statement_k: int = Field(default=60, ge=1)
    bm25: float = Field(default=1.5, ge=0)  # a turn and its episode by BM25, each
    # A question naming a date: turns said then count as first of one more ranking.
    dates: float = Field(default=2.0, ge=0)
    keyword: float = Field(default=0.15, ge=0)  # statements by full-text keywords
    tags: float = Field(default=0.5, ge=0)  # statements by tag overlap


class Boosts(_Part):
    """Factors on fused scores, each relative to a memory left as it is (1)."""

    topic: float = Field(default=0.9, ge=0)  # a topic-level memory against a fact
    concept: float = Field(default=0.95, ge=0)  # a concept-level memory against a fact
    # Memories outside episodes' turns that cite none (summaries, concepts, inferences)
    # against a turn's hit at the same fused score.
    others: float = Field(default=0.15, ge=0)
    # A memory found by its vector alone scores times 1 - spread + spread * (how far its
    # cosine stands above the candidates' median, as a share of the best one's lead); across
    # cubes, each cube's hits by its best hit's standing (streams/core/across.py).
    cosine_spread: float = Field(default=0.5, ge=0, le=1)
    # A question naming some of a cube's speakers: the others' turns lose this share.
    speaker: float = Field(default=0.2, ge=0, le=1)
    # A memory an agent called ``irrelevant`` for a query like this one (at least
    # ``irrelevant_overlap`` Jaccard of content words) scores times ``irrelevant``.
    irrelevant: float = Field(default=0.5, ge=0, le=1)
    irrelevant_overlap: float = Field(default=0.5, gt=0, le=1)
    # A question about the present puts the statement that holds now above the one it
    # replaced (streams/core/validity.py); off: ranked as if nothing had changed.
    current_first: bool = True


class Excerpts(_Part):
    """A turn's hit: the turn with neighbours of its session, and passages of hits that
    continue each other."""

    before: int = Field(default=1, ge=0)  # turns before the best one, at most
    after: int = Field(default=2, ge=0)  # turns after it, at most
    # A turn before joins only when it scores at least this share of the best turn (0: always).
    before_share: float = Field(default=0.0, ge=0)
    # A window continuing a hit of its session joins it, up to this many turns (1: never) ...
    passage_turns: int = Field(default=8, ge=1)
    # ... unless the hit is among the first this many (they stay short for a small budget).
    passage_after: int = Field(default=3, ge=0)
    # A statement extracted from the best turn is the hit, the excerpt its context.
    statement: bool = True


class Recipe(_Part):
    """How a search ranks (module docstring)."""

    recall: Recall = Recall()
    fusion: Fusion = Fusion()
    boosts: Boosts = Boosts()
    excerpts: Excerpts = Excerpts()

    def level_weight(self, level: str) -> float:
        """A hierarchy level's factor (a fact, or a level without one, is the unit)."""
        return {"topic": self.boosts.topic, "concept": self.boosts.concept}.get(level, UNIT)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Recipe:
        """This recipe with single fields changed (dotted paths or nested mappings); a
        ``ValueError`` names the first field that is unknown or refused."""
        data = self.model_dump()
        for path, value in flat(overrides).items():
            *parents, name = path.split(".")
            node: Any = data
            model: type[BaseModel] = Recipe
            for i, part in enumerate([*parents, name]):
                field = model.model_fields.get(part)
                if field is None or (i == len(parents)) != _is_leaf(field.annotation):
                    known = ", ".join(model.model_fields)
                    where = ".".join(path.split(".")[:i]) or "the recipe"
                    raise ValueError(f"search.overrides: {path!r} is not a recipe field "
                                     f"({where} has {known})")
                if i < len(parents):
                    model = field.annotation  # type: ignore[assignment]
                    node = node[part]
            node[name] = value
        try:
            return Recipe.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise ValueError(f"search.overrides: {where}: {error['msg']} "
                             f"(got {error.get('input')!r})") from None


def _is_leaf(annotation: object) -> bool:
    return not (isinstance(annotation, type) and issubclass(annotation, BaseModel))


def flat(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"fusion": {"turn_k": 30}}`` and ``{"fusion.turn_k": 30}`` alike as dotted paths."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        path = f"{prefix}{str(key).lower()}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{path}."))
        else:
            out[path] = value
    return out


PRESETS: dict[RecipeName, Recipe] = {
    # The defaults, tuned on the LoCoMo dev split (docs/benchmarks.md, *Search recipe*).
    "fast": Recipe(),
    # For a small context budget: the turn before the best one joins its excerpt only when
    # it matches the question too (fewer characters a hit, so more hits fit).
    "precise": Recipe(excerpts=Excerpts(before_share=0.5)),
}


def resolve(name: RecipeName, overrides: Mapping[str, Any]) -> Recipe:
    """The preset ``name`` with ``overrides`` applied."""
    preset = PRESETS[name]
    return preset.with_overrides(overrides) if overrides else preset


# The flat ``search.*`` settings the recipe replaced (issue 42), kept only to refuse them by
# name: a ``MEMSTREAM_SEARCH__<OLD>`` variable, silently ignored, would rank otherwise than
# its owner thinks. Old name -> the recipe field now, or what became of it.
FORMER_FIELDS: dict[str, str] = {
    "current_first": "boosts.current_first",
    "topic_weight": "boosts.topic",
    "concept_weight": "boosts.concept",
    "fact_weight": "nothing: a fact is the unit the level factors are relative to",
    "tag_overlap_min": "recall.tags_min",
    "rrf_k": "fusion.statement_k",
    "vector_weight": "nothing: the dense ranking is the unit every fusion weight is relative to",
    "keyword_weight": "fusion.keyword",
    "key_weight": "nothing: the exact key ranks with the unit weight, as the dense ranking",
    "tag_weight": "fusion.tags",
    "episode_weight": "nothing: an episode competing whole counts as a statement",
    "keyword_recall": "fusion.keyword (0: keyword recall off)",
    "cosine_spread": "boosts.cosine_spread",
    "turn_ranking": "recall.turns",
    "turn_dense_weight": "nothing: the dense ranking is the unit every fusion weight is "
                         "relative to",
    "episode_dense_weight": "nothing: the dense ranking is the unit every fusion weight is "
                            "relative to",
    "turn_bm25_weight": "fusion.bm25 (the turn's and the episode's BM25 alike)",
    "episode_bm25_weight": "fusion.bm25 (the turn's and the episode's BM25 alike)",
    "turn_rrf_k": "fusion.turn_k",
    "related_weight": "recall.related_words",
    "speaker_weight": "boosts.speaker",
    "time_weight": "fusion.dates",
    "window_before": "excerpts.before",
    "window_after": "excerpts.after",
    "before_share": "excerpts.before_share",
    "passage_turns": "excerpts.passage_turns",
    "passage_after": "excerpts.passage_after",
    "episode_pool": "recall.episodes",
    "statement_pool": "recall.statements",
    "precise_hits": "excerpts.statement",
    "irrelevant_overlap": "boosts.irrelevant_overlap",
    "irrelevant_weight": "boosts.irrelevant",
    "other_weight": "boosts.others",
}


def former_field_error(name: str) -> str:
    """The one-line refusal of an old flat setting, naming its new spelling."""
    now = FORMER_FIELDS[name]
    if now.startswith("nothing: "):
        return (f"search.{name} is no longer a setting: {now.removeprefix('nothing: ')} "
                "(docs/configuration.md)")
    path = now.split(" ")[0]
    return (f"search.{name} is now the recipe field {now}: set search.overrides, e.g. "
            f"MEMSTREAM_SEARCH__OVERRIDES='{{\"{path}\": ...}}' (docs/configuration.md)")

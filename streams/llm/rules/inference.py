"""The ``rules`` stand-in for the tasks of ``streams.prompts.inference``."""

from __future__ import annotations

from memstream.streams.prompts.inference import (
    InferenceContext,
    InferenceResponse,
)


def rules(ctx: InferenceContext) -> InferenceResponse:
    """No inferred facts without a model (rules mode writes no reasoning nodes)."""
    return InferenceResponse(fact=None)

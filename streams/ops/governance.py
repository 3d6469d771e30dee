"""Search under backlog: while extraction lags, a fine search runs as fast."""

from __future__ import annotations

import logging
from typing import TypeVar

from memstream.streams.runtime.stage import Deps
from memstream.topics.events import RequestBase, SearchRequest

log = logging.getLogger("memstream.governance")
R = TypeVar("R", bound=RequestBase)


def degrade(req: R, deps: Deps) -> R:
    """``req`` as it will run: a fine search becomes fast when the extraction lag (last
    sample) exceeds ``governance.search_degrade_lag``; the reply's ``mode_used`` says so."""
    threshold = deps.settings.governance.search_degrade_lag
    if not isinstance(req, SearchRequest) or req.mode != "fine" or threshold is None \
            or deps.ops is None:
        return req
    lag = deps.ops.extraction_lag()
    if lag is None or lag <= threshold:
        return req
    deps.ops.search_degraded.inc()
    log.info("search %s runs fast: extraction lags by %d records (> %d)", req.correlation_id,
             lag, threshold)
    return req.model_copy(update={"mode": "fast"})

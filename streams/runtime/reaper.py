"""A running worker drops group members left by workers of this host that were killed.

The embedded noida-db broker never expires a member whose process died (see
``kafka.members``): after ``SIGKILL`` of one of two workers sharing a group, the dead one
stayed a member with its partitions for good (``bench/scale.py --kill``: ``memory.items``
partitions held pending records for minutes, until the run gave up). Starting workers
already drop such members; a running worker now also looks every session timeout, so the
survivor takes the partitions over as Kafka itself would after the session timeout. The
broker then starts a new round at once; that the survivors rejoin it under the member ids
they have, rather than beside them (which left three workers stuck), is ``kafka.rejoin``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from memstream.kafka.members import remove_stale_members

log = logging.getLogger("memstream.worker")


async def reap_dead_members(bootstrap: str, groups: Iterable[str], interval_s: float) -> None:
    """Every ``interval_s``, remove members of ``groups`` whose process of this host is gone."""
    names = sorted(set(groups))
    while True:
        await asyncio.sleep(interval_s)
        try:
            removed = await remove_stale_members(bootstrap, names)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - best effort: look again next time
            log.exception("looking for members left by dead workers failed")
            continue
        if removed:
            log.warning("dropped %d group member(s) left by dead workers; their partitions "
                        "are reassigned", len(removed))

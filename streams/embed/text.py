"""What of a memory is embedded: its text, except the name in front of a quoted speaker.

A conversation kept in one cube per participant stores each sentence in every cube: bare in
its speaker's own cube, as ``"<Name>: <sentence>"`` (first tag ``<name>``) in the others. The
vector of such a quote is the vector of the sentence, so each sentence is embedded once
for all the cubes it is kept in (``SharedInFlight`` lends it) instead of once per cube;
the name stays in the stored text, which keyword search and readers see. Measured under
``bench/load.py``: the other speakers' copies were about a third of the texts embedded.
"""

from __future__ import annotations

from memstream.topics.models import MemoryItem


def passage_text(item: MemoryItem) -> str:
    """The text whose vector stands for ``item``."""
    tags = item.metadata.tags
    if tags:
        name, sep, body = item.memory.partition(": ")
        if sep and body.strip() and name.lower() == tags[0] and "\n" not in name:
            return body
    return item.memory


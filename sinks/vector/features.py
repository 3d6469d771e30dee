"""What a Milvus server can do, decided from the version it reports.

The adapter asks the server once per connection instead of guessing from the URI, because
the same ``http://`` URI may be Milvus 2.3 (the ``milvus`` package's standalone, used in
tests) or 2.5 (production). Measured on v2.3.5 (tests/contract, ``milvus-server``):

- filter templates (``cube_id == {p0}`` plus ``filter_params``) arrived in 2.5; 2.3 rejects
  the placeholder ("token recognition error at: '}'"), so values are inlined as literals;
- with a partition-key collection, 2.3 routes an *upsert* by the wrong field (fixed in
  milvus-io/milvus#30772, February 2024, in 2.4), so an upserted row lands in a partition
  its key's queries never read; below 2.4 the cube is a plain filter over one collection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"v?(\d+)\.(\d+)")


@dataclass(frozen=True)
class ServerFeatures:
    version: str
    templates: bool
    partition_key: bool

    @classmethod
    def from_version(cls, version: str) -> ServerFeatures:
        """Features of a server reporting ``version`` (e.g. ``v2.3.5-lite``, ``v2.5.4``).

        An unparseable version gets the conservative path, which works on every version.
        """
        match = _VERSION.match(version.strip())
        major_minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        return cls(
            version=version,
            templates=major_minor >= (2, 5),
            partition_key=major_minor >= (2, 4),
        )

"""Which data directory an embedded stack lives in, from wherever a command runs.

``memstream up`` keeps the broker's and FalkorDB's run files in ``.memstream``; a later
``status``, ``search`` or Python client started in a subdirectory must find the same
stack, as git finds its repository: an explicit directory (``--data-dir`` or
``MEMSTREAM_DATA_DIR``) wins, else the nearest ``.memstream`` in this directory or a
parent, else ``./.memstream`` (where ``up`` would create one).
"""

from __future__ import annotations

from pathlib import Path

from memstream.topics.settings import Settings

DEFAULT_NAME = ".memstream"


def find_data_dir(settings: Settings, start: Path | None = None) -> Path:
    """The data directory to use, as an absolute path."""
    if "data_dir" in settings.model_fields_set or settings.data_dir != Path(DEFAULT_NAME):
        return settings.data_dir.expanduser().resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_NAME
        if candidate.is_dir():
            return candidate
    return here / DEFAULT_NAME


def with_data_dir(settings: Settings, start: Path | None = None) -> Settings:
    """``settings`` with ``data_dir`` resolved by ``find_data_dir``."""
    return settings.model_copy(update={"data_dir": find_data_dir(settings, start)})

"""Per-cube data keys (memstream/security/keys.py): the first key made for a cube wins."""

from __future__ import annotations

from pathlib import Path

from memstream.security import keys


def test_the_first_key_made_for_a_cube_wins(tmp_path: Path) -> None:
    ring = keys.Keyring(tmp_path)
    first = ring.create("dan")
    assert ring.create("dan") == first == ring.get("dan")
    assert len(list(tmp_path.iterdir())) == 1  # no temporary files left behind

"""Where the suite's own files and the repository are, for a test at any depth of the tree."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"

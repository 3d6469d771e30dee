"""``python -m memstream`` runs the CLI (used by ``memstream up`` to spawn a worker)."""

from memstream.cli import main

main()

"""History, time travel and provenance, read from the retained log."""

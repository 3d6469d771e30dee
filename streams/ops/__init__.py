"""Operating a worker: metrics, LLM cost governance and cube access checks."""

"""Real test doubles: a scripted OpenAI-compatible HTTP server and the fixtures that start it."""

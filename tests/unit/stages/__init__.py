"""Each stage's logic through ``Deps`` on in-memory doubles (tests/support/doubles.py):
no broker, no graph server, no vector server."""
